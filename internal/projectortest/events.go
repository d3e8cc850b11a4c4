package projectortest

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// ValidEvent is a valid event of typ, with id, of agent in run at at: its
// data's required fields are filled in from the contract's own problems
// (an identifier, an enumeration's first value, 1 for a number, a list of
// one identifier), so that a test can send every type, the ones added
// after it was written included. The optional fields stay empty.
func ValidEvent(typ topics.EventType, id, run, agent string, at time.Time) (*topics.Event, error) {
	data := topics.NewPayload(typ)
	if data == nil {
		return nil, fmt.Errorf("projectortest: unknown event type %q", typ)
	}
	ev := &topics.Event{ID: id, Source: "/projectortest", Type: typ, Time: topics.NewTime(at), RunID: run, AgentID: agent,
		SchemaVersion: topics.CurrentSchemaVersion, Data: data}
	v := reflect.ValueOf(data).Elem()
	for range 8 {
		err := ev.Validate()
		var de *topics.DecodeError
		if err == nil {
			return ev, nil
		}
		if !errors.As(err, &de) {
			return nil, err
		}
		for _, p := range de.Problems {
			if err := fill(v, p, at); err != nil {
				return nil, fmt.Errorf("projectortest: a valid %s: %w (%v)", typ, err, de)
			}
		}
	}
	return nil, fmt.Errorf("projectortest: no valid %s found: %v", typ, ev.Validate())
}

// fill sets the field of data v that problem p names to a value the
// contract takes.
func fill(v reflect.Value, p topics.Problem, at time.Time) error {
	name, ok := strings.CutPrefix(p.Field, "data.")
	if !ok {
		if p.Field != "data" {
			return fmt.Errorf("%s: %s", p.Field, p.Problem)
		}
		// "names nothing: give at least one of a, b, ...": the first.
		_, list, found := strings.Cut(p.Problem, "at least one of ")
		if !found {
			return fmt.Errorf("data: %s", p.Problem)
		}
		name, _, _ = strings.Cut(list, ",")
	}
	f, ok := fieldByJSON(v, name)
	if !ok {
		return fmt.Errorf("no field %q: %s", name, p.Problem)
	}
	switch {
	case f.Kind() == reflect.String:
		val := "x1"
		if _, opts, found := strings.Cut(p.Problem, "want one of "); found {
			val, _, _ = strings.Cut(strings.FieldsFunc(opts, func(r rune) bool { return r == ',' || r == ' ' })[0], "|")
		}
		f.SetString(val)
	case f.CanInt():
		f.SetInt(1)
	case f.Kind() == reflect.Slice && f.Type().Elem().Kind() == reflect.String:
		f.Set(reflect.Append(reflect.MakeSlice(f.Type(), 0, 1), reflect.ValueOf("x1").Convert(f.Type().Elem())))
	case f.Type() == reflect.TypeFor[topics.Time]():
		f.Set(reflect.ValueOf(topics.NewTime(at.Add(time.Hour))))
	case f.Kind() == reflect.Pointer && f.Type().Elem() == reflect.TypeFor[topics.Time]():
		t := topics.NewTime(at.Add(time.Hour))
		f.Set(reflect.ValueOf(&t))
	case f.Kind() == reflect.Pointer && f.Type().Elem().Kind() == reflect.Bool:
		b := true
		f.Set(reflect.ValueOf(&b))
	case f.Kind() == reflect.Pointer && f.Type().Elem().Kind() == reflect.Int64:
		n := int64(1)
		f.Set(reflect.ValueOf(&n))
	default:
		return fmt.Errorf("data.%s (%s): %s", name, f.Type(), p.Problem)
	}
	return nil
}

// fieldByJSON is the field of struct v whose JSON name is name.
func fieldByJSON(v reflect.Value, name string) (reflect.Value, bool) {
	for i := range v.NumField() {
		if tag, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ","); tag == name && v.Type().Field(i).IsExported() {
			return v.Field(i), true
		}
	}
	return reflect.Value{}, false
}
