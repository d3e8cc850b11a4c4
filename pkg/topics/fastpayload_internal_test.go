package topics

import (
	"reflect"
	"testing"
)

// TestFastPathCoversEveryType: every payload type is one the fast path
// sets (fastFields has it), so that no type of the vocabulary is decoded
// by reflection walking alone; a field of a kind the fast path does not
// know would take its whole type off it.
func TestFastPathCoversEveryType(t *testing.T) {
	for _, typ := range EventTypes() {
		p := reflect.TypeOf(NewPayload(typ))
		if _, ok := fastFields[p]; ok {
			continue
		}
		t.Errorf("%s has no fast path", typ)
		for i := range p.Elem().NumField() {
			if f := p.Elem().Field(i); f.IsExported() && kindOf(f.Type) == 0 {
				t.Errorf("%s: field %s of type %s is not one the fast path sets", typ, f.Name, f.Type)
			}
		}
	}
}
