package schema

import "fmt"

// MaxDepth is how deeply arrays and maps may nest in a config payload. Real
// configs nest a handful of levels (block, block list, list attribute); the
// limit keeps a hostile payload from exhausting the stack of the recursive
// msgpack decoder.
const MaxDepth = 100

// CheckMsgpack verifies, without allocating, that data is exactly one
// well-formed msgpack value whose every declared length fits in the bytes
// that follow it: an array of n elements needs at least n more bytes and a
// map of n entries 2n (each element takes at least one byte), a string,
// binary or extension of n bytes needs n. Nesting deeper than MaxDepth is
// refused. A payload that passes can be decoded with memory proportional to
// its size, so the msgpack library never sees a 5-byte header that claims
// four billion elements.
func CheckMsgpack(data []byte) error {
	c := checker{data: data}
	if err := c.value(0); err != nil {
		return err
	}
	if c.pos != len(data) {
		return fmt.Errorf("%d bytes of trailing data after the value at offset %d", len(data)-c.pos, c.pos)
	}
	return nil
}

type checker struct {
	data []byte
	pos  int
}

func (c *checker) left() uint64 { return uint64(len(c.data) - c.pos) }

// skip consumes n bytes of payload; what counts as the value at offset at is
// only for the error message.
func (c *checker) skip(n uint64, what string, at int) error {
	if n > c.left() {
		return fmt.Errorf("offset %d: %s of %d bytes, but only %d remain", at, what, n, c.left())
	}
	c.pos += int(n)
	return nil
}

// length reads a big-endian length field of size bytes.
func (c *checker) length(size int, at int) (uint64, error) {
	if uint64(size) > c.left() {
		return 0, fmt.Errorf("offset %d: truncated length field", at)
	}
	var n uint64
	for _, b := range c.data[c.pos : c.pos+size] {
		n = n<<8 | uint64(b)
	}
	c.pos += size
	return n, nil
}

// container checks n elements (arrays) or n key-value pairs (maps, per = 2).
func (c *checker) container(n, per uint64, what string, at, depth int) error {
	if depth >= MaxDepth {
		return fmt.Errorf("offset %d: nested more than %d levels deep", at, MaxDepth)
	}
	items := n * per // n < 2^32, so this cannot overflow
	if items > c.left() {
		return fmt.Errorf("offset %d: %s of %d elements needs at least %d more bytes, but only %d remain", at, what, n, items, c.left())
	}
	for i := uint64(0); i < items; i++ {
		if err := c.value(depth + 1); err != nil {
			return err
		}
	}
	return nil
}

// sized reads a length field of size bytes, then skips that many bytes
// plus extra (an extension's type byte).
func (c *checker) sized(size int, extra uint64, what string, at int) error {
	n, err := c.length(size, at)
	if err != nil {
		return err
	}
	return c.skip(n+extra, what, at)
}

func (c *checker) value(depth int) error {
	at := c.pos
	if c.left() == 0 {
		return fmt.Errorf("offset %d: unexpected end of data", at)
	}
	code := c.data[c.pos]
	c.pos++
	switch {
	case code <= 0x7f, code >= 0xe0: // positive and negative fixint
		return nil
	case code <= 0x8f:
		return c.container(uint64(code&0x0f), 2, "map", at, depth)
	case code <= 0x9f:
		return c.container(uint64(code&0x0f), 1, "array", at, depth)
	case code <= 0xbf:
		return c.skip(uint64(code&0x1f), "string", at)
	}
	switch code {
	case 0xc0, 0xc2, 0xc3: // nil, false, true
		return nil
	case 0xc4, 0xc5, 0xc6: // bin 8/16/32
		return c.sized(1<<(code-0xc4), 0, "binary", at)
	case 0xc7, 0xc8, 0xc9: // ext 8/16/32: length, type byte, data
		return c.sized(1<<(code-0xc7), 1, "extension", at)
	case 0xca:
		return c.skip(4, "float32", at)
	case 0xcb:
		return c.skip(8, "float64", at)
	case 0xcc, 0xcd, 0xce, 0xcf: // uint 8/16/32/64
		return c.skip(1<<(code-0xcc), "integer", at)
	case 0xd0, 0xd1, 0xd2, 0xd3: // int 8/16/32/64
		return c.skip(1<<(code-0xd0), "integer", at)
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext 1/2/4/8/16: type byte, data
		return c.skip(1+1<<(code-0xd4), "extension", at)
	case 0xd9, 0xda, 0xdb: // str 8/16/32
		return c.sized(1<<(code-0xd9), 0, "string", at)
	case 0xdc, 0xdd: // array 16/32
		n, err := c.length(2<<(code-0xdc), at)
		if err != nil {
			return err
		}
		return c.container(n, 1, "array", at, depth)
	case 0xde, 0xdf: // map 16/32
		n, err := c.length(2<<(code-0xde), at)
		if err != nil {
			return err
		}
		return c.container(n, 2, "map", at, depth)
	}
	return fmt.Errorf("offset %d: byte 0x%02x starts no msgpack value", at, code)
}
