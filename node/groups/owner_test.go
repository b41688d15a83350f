package groups

import (
	"reflect"
	"testing"
)

// TestStateHasNoWayInButMethods: a live group's state has one owner, the Group, whose
// methods are the only way in (doc.go, "Who writes a group's state"): none of the types
// that hold it has an exported field (nor an embedded type, whose fields would be promoted)
// that another package could read or write past the group's mutex.
func TestStateHasNoWayInButMethods(t *testing.T) {
	for _, v := range []any{Group{}, Member{}, Stream{}, Flight{}, gtopic{}} {
		typ := reflect.TypeOf(v)
		for i := range typ.NumField() {
			if f := typ.Field(i); f.IsExported() || f.Anonymous {
				t.Errorf("%s.%s is exported or embedded: a group's state is reached through the Group's methods only", typ.Name(), f.Name)
			}
		}
	}
}
