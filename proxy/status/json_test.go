package status

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// Issue 44: `-o json` is stable and documented. Every field of the
// document, at every depth, has its row in docs/status.md, and every row
// names a field.
func TestStatusJSONDocumented(t *testing.T) {
	page, err := os.ReadFile("../../docs/status.md")
	if err != nil {
		t.Fatal(err)
	}
	fields := map[string]bool{}
	jsonFields(reflect.TypeOf(Cluster{}), "", fields)
	if len(fields) < 20 {
		t.Fatalf("found %d fields: the walk is broken", len(fields))
	}
	for f := range fields {
		if !strings.Contains(string(page), "`"+f+"`") && !strings.Contains(string(page), "`"+f+"[]`") {
			t.Errorf("docs/status.md has no row for %s", f)
		}
	}
	if !strings.Contains(string(page), "`layout` | the document's layout: 1") || Layout != 1 {
		t.Errorf("docs/status.md documents another layout than %d", Layout)
	}
}

// jsonFields adds the JSON paths of t's fields ("nodes[].grace") and of
// the structs they hold; the window's are documented on its own row.
func jsonFields(t reflect.Type, prefix string, out map[string]bool) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || t.PkgPath() != reflect.TypeOf(Cluster{}).PkgPath() {
		return
	}
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		path := name
		if prefix != "" {
			path = prefix + "." + name
		}
		out[path] = true
		ft := t.Field(i).Type
		inner := path
		if ft.Kind() == reflect.Slice {
			inner = path + "[]"
		}
		jsonFields(ft, inner, out)
	}
}
