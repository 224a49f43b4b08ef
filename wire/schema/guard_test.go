package schema

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
)

func nest(open byte, levels int, leaf ...byte) []byte {
	return append(bytes.Repeat([]byte{open}, levels), leaf...)
}

// TestDecodeRejectsHostilePayloads feeds Decode payloads that would make an
// unguarded msgpack decoder allocate gigabytes or recurse without end; each
// must come back as an error, having allocated next to nothing.
func TestDecodeRejectsHostilePayloads(t *testing.T) {
	cases := []struct {
		name    string
		payload []byte
		err     string
	}{
		{"array32 of 4G elements", []byte{0xdd, 0xff, 0xff, 0xff, 0xff}, "array of 4294967295 elements needs at least 4294967295 more bytes, but only 0 remain"},
		{"map32 of 4G entries", []byte{0xdf, 0xff, 0xff, 0xff, 0xff}, "map of 4294967295 elements needs at least 8589934590 more bytes"},
		{"str32 of 4 GiB", []byte{0xdb, 0xff, 0xff, 0xff, 0xff}, "string of 4294967295 bytes, but only 0 remain"},
		{"bin32 of 4 GiB", []byte{0xc6, 0xff, 0xff, 0xff, 0xff}, "binary of 4294967295 bytes"},
		{"ext32 of 4 GiB", []byte{0xc9, 0xff, 0xff, 0xff, 0xff, 0x01}, "extension of 4294967296 bytes"},
		{"array16 longer than the rest", []byte{0xdc, 0xff, 0xff, 0xc0, 0xc0}, "array of 65535 elements"},
		{"map16 with one byte per entry", []byte{0xde, 0x00, 0x02, 0xa1, 'a', 0xc0}, "map of 2 elements needs at least 4 more bytes, but only 3 remain"},
		{"huge array inside a block", []byte{0x81, 0xa1, 'a', 0xdd, 0x7f, 0xff, 0xff, 0xff, 0xc0}, "offset 3: array of 2147483647 elements"},
		{"huge string key", []byte{0x81, 0xdb, 0x10, 0x00, 0x00, 0x00, 'a'}, "offset 1: string of 268435456 bytes"},
		{"truncated length field", []byte{0xdd, 0xff, 0xff}, "truncated length field"},
		{"truncated uint64", []byte{0x81, 0xa1, 'a', 0xcf, 0x01}, "integer of 8 bytes, but only 1 remain"},
		{"truncated float64", []byte{0xcb, 0, 0, 0}, "float64 of 8 bytes"},
		{"truncated fixext16", []byte{0xd8, 0x01, 0x00}, "extension of 17 bytes"},
		{"map missing its value", []byte{0x81, 0xa1, 'a'}, "offset 3: unexpected end of data"},
		{"fixarray missing elements", []byte{0x93, 0xc0}, "array of 3 elements"},
		{"never-used code", []byte{0x81, 0xa1, 'a', 0xc1}, "offset 3: byte 0xc1 starts no msgpack value"},
		{"trailing bytes", []byte{0x80, 0x80}, "1 bytes of trailing data after the value at offset 1"},
		{"arrays nested one level too deep", nest(0x91, MaxDepth+1, 0xc0), "nested more than 100 levels deep"},
		{"maps nested one level too deep", bytes.Repeat([]byte{0x81, 0xa1, 'k'}, MaxDepth+1), "nested more than 100 levels deep"},
		{"a megabyte of nested arrays", nest(0x91, 1<<20, 0xc0), "nested more than 100 levels deep"},
		{"a megabyte of nested array32 headers", bytes.Repeat([]byte{0xdd, 0, 0, 0, 1}, 1<<18), "nested more than 100 levels deep"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			var s sample
			err := Decode(c.payload, &s)
			runtime.ReadMemStats(&after)
			if err == nil || !strings.Contains(err.Error(), "config is not valid msgpack: ") || !strings.Contains(err.Error(), c.err) {
				t.Fatalf("error %v, want \"config is not valid msgpack: …%s…\"", err, c.err)
			}
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
				t.Errorf("decoding a %d-byte payload allocated %d bytes", len(c.payload), grew)
			}
		})
	}
}

// TestCheckMsgpackAcceptsWellFormed makes sure the guard refuses nothing the
// msgpack library would decode for a real config: every type code, nesting
// right at the limit, and lengths that exactly fit.
func TestCheckMsgpackAcceptsWellFormed(t *testing.T) {
	cases := []struct {
		name    string
		payload []byte
	}{
		{"agent config", encode(t, agentMap(map[string]any{"labels": map[string]any{"a": "b"}, "ratio": 0.5}))},
		{"scalars", encode(t, []any{nil, true, false, int8(-3), uint8(200), int16(-300), uint16(60000), int32(-70000),
			uint32(1 << 31), int64(-1 << 40), uint64(1 << 63), float32(1.5), 2.5, "s", strings.Repeat("x", 300), []byte{1, 2}})},
		{"str8, str16, bin16", []byte{0x93, 0xd9, 0x01, 'a', 0xda, 0x00, 0x01, 'b', 0xc5, 0x00, 0x01, 0x00}},
		{"every ext form", []byte{0x98, 0xd4, 1, 0, 0xd5, 1, 0, 0, 0xd6, 1, 0, 0, 0, 0, 0xd7, 1, 0, 0, 0, 0, 0, 0, 0, 0,
			0xd8, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xc7, 0, 1, 0xc8, 0, 1, 1, 0, 0xc9, 0, 0, 0, 0, 1}},
		{"array32 and map32 that fit", []byte{0x92, 0xdd, 0, 0, 0, 2, 0xc0, 0xc0, 0xdf, 0, 0, 0, 1, 0xa0, 0xc0}},
		{"nesting at the limit", nest(0x91, MaxDepth, 0xc0)},
		{"wide array", append([]byte{0xdd, 0, 1, 0, 0}, bytes.Repeat([]byte{0xc0}, 1<<16)...)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := CheckMsgpack(c.payload); err != nil {
				t.Fatal(err)
			}
		})
	}
}
