// Package structs holds the plain Go forms of Nomad's shared plugin structs
// (attributes with units, stat values and objects) and their wire conversions,
// so domain code never touches generated protobuf types.
package structs

import (
	"fmt"
	"strconv"

	"google.golang.org/protobuf/types/known/wrapperspb"

	structspb "github.com/nomad-gpu/nomad-gpu/wire/proto/nomad/structs"
)

// Attribute is one typed value; exactly one of the value fields is set. A
// unit is allowed only on numbers, and only from Nomad's list.
type Attribute struct {
	Int    *int64
	Float  *float64
	String *string
	Bool   *bool
	Unit   string
}

func NewInt(v int64, unit string) Attribute { return Attribute{Int: &v, Unit: unit} }
func NewString(v string) Attribute          { return Attribute{String: &v} }
func NewBool(v bool) Attribute              { return Attribute{Bool: &v} }

// units is the list the Nomad client accepts (plugins/shared/structs/units.go);
// any other unit makes the client reject the whole fingerprint.
var units = map[string]bool{}

func init() {
	for _, u := range []string{
		"KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "kB", "KB", "MB", "GB", "TB", "PB", "EB",
		"KiB/s", "MiB/s", "GiB/s", "TiB/s", "PiB/s", "EiB/s", "kB/s", "KB/s", "MB/s", "GB/s", "TB/s", "PB/s", "EB/s",
		"MHz", "GHz", "mW", "W", "kW", "MW", "GW",
	} {
		units[u] = true
	}
}

// Validate applies the client's rules, so a bad attribute is caught here
// instead of silently disabling the plugin on the agent.
func (a Attribute) Validate() error {
	n := 0
	for _, set := range []bool{a.Int != nil, a.Float != nil, a.String != nil, a.Bool != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return fmt.Errorf("attribute must have exactly one value, has %d", n)
	}
	if a.Unit == "" {
		return nil
	}
	if a.String != nil || a.Bool != nil {
		return fmt.Errorf("unit %q on a non-numeric attribute", a.Unit)
	}
	if !units[a.Unit] {
		return fmt.Errorf("unit %q is not one Nomad accepts", a.Unit)
	}
	return nil
}

// Text renders the attribute as Nomad shows it: the value followed by its unit.
func (a Attribute) Text() string {
	var s string
	switch {
	case a.Int != nil:
		s = strconv.FormatInt(*a.Int, 10)
	case a.Float != nil:
		s = strconv.FormatFloat(*a.Float, 'f', -1, 64)
	case a.String != nil:
		s = *a.String
	case a.Bool != nil:
		s = strconv.FormatBool(*a.Bool)
	}
	if a.Unit != "" {
		s += " " + a.Unit
	}
	return s
}

func AttributeToProto(a Attribute) *structspb.Attribute {
	out := &structspb.Attribute{Unit: a.Unit}
	switch {
	case a.Int != nil:
		out.Value = &structspb.Attribute_IntVal{IntVal: *a.Int}
	case a.Float != nil:
		out.Value = &structspb.Attribute_FloatVal{FloatVal: *a.Float}
	case a.String != nil:
		out.Value = &structspb.Attribute_StringVal{StringVal: *a.String}
	case a.Bool != nil:
		out.Value = &structspb.Attribute_BoolVal{BoolVal: *a.Bool}
	}
	return out
}

func AttributeFromProto(p *structspb.Attribute) Attribute {
	a := Attribute{Unit: p.GetUnit()}
	switch v := p.GetValue().(type) {
	case *structspb.Attribute_IntVal:
		a.Int = &v.IntVal
	case *structspb.Attribute_FloatVal:
		a.Float = &v.FloatVal
	case *structspb.Attribute_StringVal:
		a.String = &v.StringVal
	case *structspb.Attribute_BoolVal:
		a.Bool = &v.BoolVal
	}
	return a
}

// StatValue is one measurement; Nomad renders numerator/denominator pairs as
// "used / total" (e.g. memory) and a lone numerator as a plain value.
type StatValue struct {
	FloatNumerator, FloatDenominator *float64
	IntNumerator, IntDenominator     *int64
	String                           *string
	Bool                             *bool
	Unit                             string
	Desc                             string
}

// StatObject nests named stat values.
type StatObject struct {
	Nested     map[string]*StatObject
	Attributes map[string]*StatValue
}

func StatValueToProto(v *StatValue) *structspb.StatValue {
	if v == nil {
		return nil
	}
	out := &structspb.StatValue{Unit: v.Unit, Desc: v.Desc}
	if v.FloatNumerator != nil {
		out.FloatNumeratorVal = wrapperspb.Double(*v.FloatNumerator)
	}
	if v.FloatDenominator != nil {
		out.FloatDenominatorVal = wrapperspb.Double(*v.FloatDenominator)
	}
	if v.IntNumerator != nil {
		out.IntNumeratorVal = wrapperspb.Int64(*v.IntNumerator)
	}
	if v.IntDenominator != nil {
		out.IntDenominatorVal = wrapperspb.Int64(*v.IntDenominator)
	}
	if v.String != nil {
		out.StringVal = wrapperspb.String(*v.String)
	}
	if v.Bool != nil {
		out.BoolVal = wrapperspb.Bool(*v.Bool)
	}
	return out
}

func StatObjectToProto(o *StatObject) *structspb.StatObject {
	if o == nil {
		return nil
	}
	out := &structspb.StatObject{}
	if len(o.Nested) > 0 {
		out.Nested = make(map[string]*structspb.StatObject, len(o.Nested))
		for k, n := range o.Nested {
			out.Nested[k] = StatObjectToProto(n)
		}
	}
	if len(o.Attributes) > 0 {
		out.Attributes = make(map[string]*structspb.StatValue, len(o.Attributes))
		for k, v := range o.Attributes {
			out.Attributes[k] = StatValueToProto(v)
		}
	}
	return out
}
