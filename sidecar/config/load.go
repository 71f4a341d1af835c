package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// SyntaxError is a problem found while decoding the YAML file, before any
// value is checked: an unknown field, a malformed duration. Line is 1-based.
type SyntaxError struct {
	File  string // set by Load
	Line  int
	Field string // path like "subscriptions[0].backof"
	Msg   string
}

func (e *SyntaxError) Error() string {
	if e.File != "" {
		return fmt.Sprintf("config: %s: line %d: %s: %s", e.File, e.Line, e.Field, e.Msg)
	}
	return fmt.Sprintf("config: line %d: %s: %s", e.Line, e.Field, e.Msg)
}

// Load reads the file at path, decodes it strictly, fills defaults and
// validates it. Every problem is reported at once. Environment and flags are
// not applied: see Resolve.
func Load(path string) (*Config, error) {
	c, err := decodeFile(path)
	if err != nil {
		return nil, err
	}
	return finish(c)
}

// Parse is Load for a file already read.
func Parse(data []byte) (*Config, error) {
	c, err := decode(data)
	var se *SyntaxError
	if err != nil && !errors.As(err, &se) {
		return nil, fmt.Errorf("config: %w", err)
	}
	if err != nil {
		return nil, err
	}
	return finish(c)
}

func finish(c *Config) (*Config, error) {
	c.ApplyDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

func decodeFile(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	c, err := decode(data)
	if err == nil {
		return c, nil
	}
	var se *SyntaxError
	if !errors.As(err, &se) { // a single error from yaml.v3
		return nil, fmt.Errorf("config: %s: %w", path, err)
	}
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		e.(*SyntaxError).File = path
	}
	return nil, err
}

// decode turns YAML into a Config without defaults or validation (errors
// are []*SyntaxError joined, or one unprefixed error from yaml.v3), except
// topic retention, whose default (168h) is filled here when the field is
// absent because 0 means forever. An empty document is an empty Config.
//
// Two passes: the first walks the YAML tree against the Config type and
// reports every unknown field, malformed duration and value of the wrong
// kind with its line and path (yaml.v3 stops at the first and names Go
// types, not our paths); the second is yaml.v3's strict decoder
// (KnownFields), which then finds nothing left to reject but overflows.
func decode(data []byte) (*Config, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, err
	}
	var c Config
	if root.Kind == 0 { // empty file or only comments
		return &c, nil
	}
	w := walker{present: map[string]bool{}}
	w.walk(&root, reflect.TypeFor[Config](), "")
	if len(w.errs) > 0 {
		return nil, errors.Join(w.errs...)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		return nil, err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err != io.EOF {
		return nil, errors.New("the file holds more than one YAML document (---); put everything in one")
	}
	for i := range c.Topics {
		if !w.present[fmt.Sprintf("topics[%d].retention", i)] {
			c.Topics[i].Retention = DefaultRetention
		}
	}
	return &c, nil
}

type walker struct {
	errs    []error
	present map[string]bool
}

var (
	durationType = reflect.TypeFor[time.Duration]()
	redisTLSType = reflect.TypeFor[RedisTLSConfig]()
)

func (w *walker) walk(n *yaml.Node, t reflect.Type, path string) {
	for n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) > 0 {
			w.walk(n.Content[0], t, path)
		}
		return
	}
	switch {
	case t == durationType:
		if n.ShortTag() == "!!null" {
			return
		}
		if n.Kind != yaml.ScalarNode {
			w.typeErr(n, path, "a duration, like 30s")
			return
		}
		// A bare number (even 0) is refused: yaml.v3 will not decode one into
		// a duration, and "30" is ambiguous anyway.
		if _, err := time.ParseDuration(n.Value); err != nil || n.ShortTag() != "!!str" {
			w.errs = append(w.errs, &SyntaxError{Line: n.Line, Field: path,
				Msg: fmt.Sprintf("%s is not a duration: write a number with a unit, like 0s, 50ms, 30s, 1h30m or 168h", n.Value)})
		}
	case n.ShortTag() == "!!null":
		return // leaves the zero value: the default
	case t == redisTLSType && n.Kind == yaml.ScalarNode:
		// redis.tls: true|false, the form from before its files existed.
		if n.ShortTag() != "!!bool" {
			w.typeErr(n, path, "true, false or a mapping (ca_file, cert_file, key_file, server_name)")
		}
	case t.Kind() == reflect.Struct && n.Kind != yaml.MappingNode:
		w.typeErr(n, path, "a mapping of fields (field: value)")
	case t.Kind() == reflect.Slice && n.Kind != yaml.SequenceNode:
		w.typeErr(n, path, "a list, like [a, b] or one \"- item\" per line")
	case t.Kind() == reflect.String && n.Kind != yaml.ScalarNode:
		w.typeErr(n, path, "a single value")
	case t.Kind() == reflect.Bool && (n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool"):
		w.typeErr(n, path, "true or false")
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Int64 && (n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int"):
		w.typeErr(n, path, "a whole number (sizes are in bytes)")
	case t.Kind() == reflect.Float64 && (n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" && n.ShortTag() != "!!float"):
		w.typeErr(n, path, "a number")
	case t.Kind() == reflect.Struct:
		fields := yamlFields(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, val := n.Content[i], n.Content[i+1]
			if k.Value == "<<" { // merge key: the merged mapping has the same type
				w.walk(val, t, path)
				continue
			}
			p := join(path, k.Value)
			f, ok := fields[k.Value]
			if !ok {
				w.errs = append(w.errs, &SyntaxError{Line: k.Line, Field: p, Msg: unknownMsg(k.Value, fields)})
				continue
			}
			w.present[p] = true
			w.walk(val, f, p)
		}
	case t.Kind() == reflect.Slice:
		for i, e := range n.Content {
			w.walk(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i))
		}
	}
}

func (w *walker) typeErr(n *yaml.Node, path, want string) {
	v := n.Value
	switch n.Kind {
	case yaml.MappingNode:
		v = "a mapping"
	case yaml.SequenceNode:
		v = "a list"
	default:
		v = fmt.Sprintf("%q", v)
	}
	w.errs = append(w.errs, &SyntaxError{Line: n.Line, Field: path, Msg: fmt.Sprintf("%s: must be %s", v, want)})
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func yamlFields(t reflect.Type) map[string]reflect.Type {
	m := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name != "" && name != "-" {
			m[name] = f.Type
		}
	}
	return m
}

func unknownMsg(name string, fields map[string]reflect.Type) string {
	names := make([]string, 0, len(fields))
	best, bestD := "", 4
	for f := range fields {
		names = append(names, f)
		if d := distance(name, f); d < bestD || d == bestD && f < best {
			best, bestD = f, d
		}
	}
	slices.Sort(names)
	msg := "unknown field"
	if best != "" && bestD <= max(1, len(name)/3) {
		msg += fmt.Sprintf(" (did you mean %s?)", best)
	}
	return msg + "; the fields here are " + strings.Join(names, ", ")
}

// distance is the Levenshtein distance, for "did you mean".
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
