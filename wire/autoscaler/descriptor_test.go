package autoscaler

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	apmpb "github.com/nomad-gpu/nomad-gpu/wire/proto/autoscaler/apm"
	basepb "github.com/nomad-gpu/nomad-gpu/wire/proto/autoscaler/base"
	sharedpb "github.com/nomad-gpu/nomad-gpu/wire/proto/autoscaler/shared"
	strategypb "github.com/nomad-gpu/nomad-gpu/wire/proto/autoscaler/strategy"
	targetpb "github.com/nomad-gpu/nomad-gpu/wire/proto/autoscaler/target"

	// Linked in to prove that a binary holding both protocols registers
	// no file or name twice (protobuf panics at init if it does).
	_ "github.com/nomad-gpu/nomad-gpu/wire/proto/nomad/base"
	_ "github.com/nomad-gpu/nomad-gpu/wire/proto/nomad/device"
	_ "github.com/nomad-gpu/nomad-gpu/wire/proto/nomad/drivers"
)

// upstreamWire is what the upstream autoscaler's protos define on the
// wire, rendered by renderWire from a `buf build` image of
// plugins/{base,shared,apm,strategy,target}/proto/v1/*.proto. To redo it:
// AUTOSCALER_UPSTREAM_IMAGE=image.binpb go test -run TestWireMatchesUpstream
const upstreamWire = "testdata/upstream-wire.txt"

// TestWireMatchesUpstream: every package, message, field (number, name,
// type), enum value, service and method of ours is the upstream one.
func TestWireMatchesUpstream(t *testing.T) {
	ours := renderWire([]protoreflect.FileDescriptor{
		basepb.File_autoscaler_base_base_proto,
		sharedpb.File_autoscaler_shared_shared_proto,
		apmpb.File_autoscaler_apm_apm_proto,
		strategypb.File_autoscaler_strategy_strategy_proto,
		targetpb.File_autoscaler_target_target_proto,
	})
	if img := os.Getenv("AUTOSCALER_UPSTREAM_IMAGE"); img != "" {
		b, err := os.ReadFile(img)
		if err != nil {
			t.Fatal(err)
		}
		var set descriptorpb.FileDescriptorSet
		if err := proto.Unmarshal(b, &set); err != nil {
			t.Fatal(err)
		}
		files, err := protodesc.NewFiles(&set)
		if err != nil {
			t.Fatal(err)
		}
		var fds []protoreflect.FileDescriptor
		files.RangeFiles(func(f protoreflect.FileDescriptor) bool {
			if strings.HasPrefix(string(f.Package()), "hashicorp.nomad_autoscaler.") {
				fds = append(fds, f)
			}
			return true
		})
		if err := os.WriteFile(upstreamWire, []byte(renderWire(fds)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(upstreamWire)
	if err != nil {
		t.Fatal(err)
	}
	if ours != string(want) {
		t.Fatalf("our protos differ from upstream's on the wire:\n--- ours\n%s\n--- upstream (%s)\n%s", ours, upstreamWire, want)
	}
}

// renderWire lists what matters on the wire, one line each, sorted.
func renderWire(files []protoreflect.FileDescriptor) string {
	var lines []string
	add := func(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) }
	var message func(m protoreflect.MessageDescriptor)
	enum := func(e protoreflect.EnumDescriptor) {
		for i := 0; i < e.Values().Len(); i++ {
			v := e.Values().Get(i)
			add("enum %s %s = %d", e.FullName(), v.Name(), v.Number())
		}
	}
	message = func(m protoreflect.MessageDescriptor) {
		add("message %s", m.FullName())
		for i := 0; i < m.Fields().Len(); i++ {
			f := m.Fields().Get(i)
			var typ string
			switch {
			case f.IsMap():
				typ = fmt.Sprintf("map<%s, %s>", kindName(f.MapKey()), kindName(f.MapValue()))
			default:
				typ = kindName(f)
				if f.Cardinality() == protoreflect.Repeated {
					typ = "repeated " + typ
				}
			}
			add("field %s %d %s %s", m.FullName(), f.Number(), f.Name(), typ)
		}
		for i := 0; i < m.Enums().Len(); i++ {
			enum(m.Enums().Get(i))
		}
		for i := 0; i < m.Messages().Len(); i++ {
			if !m.Messages().Get(i).IsMapEntry() {
				message(m.Messages().Get(i))
			}
		}
	}
	for _, f := range files {
		add("package %s", f.Package())
		for i := 0; i < f.Messages().Len(); i++ {
			message(f.Messages().Get(i))
		}
		for i := 0; i < f.Enums().Len(); i++ {
			enum(f.Enums().Get(i))
		}
		for i := 0; i < f.Services().Len(); i++ {
			s := f.Services().Get(i)
			add("service %s", s.FullName())
			for j := 0; j < s.Methods().Len(); j++ {
				m := s.Methods().Get(j)
				add("rpc %s/%s(%s) returns (%s) client_streaming=%v server_streaming=%v",
					s.FullName(), m.Name(), m.Input().FullName(), m.Output().FullName(), m.IsStreamingClient(), m.IsStreamingServer())
			}
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n") + "\n"
}

func kindName(f protoreflect.FieldDescriptor) string {
	switch f.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return string(f.Message().FullName())
	case protoreflect.EnumKind:
		return "enum " + string(f.Enum().FullName())
	}
	return f.Kind().String()
}
