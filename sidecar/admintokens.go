package sidecar

import (
	"fmt"
	"log/slog"
	"regexp"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/spoolmq/spool/sidecar/authn"
)

// Limits of admin.tokens_file. A file over them is refused whole (at
// start: spoold does not start; on a reload: the previous tokens stay).
const (
	// MaxTokensFileBytes bounds the file read.
	MaxTokensFileBytes = 1 << 20
	// MaxTokens bounds its entries: each call compares against all.
	MaxTokens = 10_000
	// MinTokenBytes: a shorter token could be guessed.
	MinTokenBytes = 16
)

var tokenName = regexp.MustCompile(`^[A-Za-z0-9._@:/-]{1,128}$`)

// adminTokensFormat is admin.tokens_file's: "<token> <name> <role>" a
// line (package authn reads it, and again when it changes).
var adminTokensFormat = authn.Format{
	Setting: "admin.tokens_file", Extra: 1, Usage: "<token> <name> <read|operate>",
	MinTokenBytes: MinTokenBytes, MaxTokens: MaxTokens, MaxFileBytes: MaxTokensFileBytes,
	CheckName: func(name string) error {
		if !tokenName.MatchString(name) {
			return fmt.Errorf("name %q: 1 to 128 of A-Z a-z 0-9 . _ @ : / -", name)
		}
		return nil
	},
	CheckExtra: func(extra []string) error {
		if _, ok := parseRole(extra[0]); !ok {
			return fmt.Errorf("role %q: read or operate", extra[0])
		}
		return nil
	},
}

// openTokenFile opens admin.tokens_file; gauge follows its entries.
func openTokenFile(path string, gauge prometheus.Gauge, logger *slog.Logger) (*authn.File, error) {
	return authn.Open(path, adminTokensFormat, logger, func(s *authn.Set) { gauge.Set(float64(s.Len())) })
}

// tokenPrincipal is who a token of admin.tokens_file is.
func tokenPrincipal(f *authn.File, token string) (principal, bool) {
	e, ok := f.Lookup(token)
	if !ok {
		return principal{}, false
	}
	r, _ := parseRole(e.Extra[0]) // checked when the file loaded
	return principal{name: e.Name, via: "token", role: r}, true
}

// Bounds of what an audit line repeats of a request.
const (
	maxAuditString = 256
	maxAuditList   = 32
)

// auditArgs are the key arguments of an admin request for its audit line:
// its scalar fields that are set (topic, group, node, partitions, dry run,
// the reset's target...), strings cut to 256 bytes and lists to 32 items.
// Bytes and nested messages (payloads, filters) are left out. Admin
// requests carry no secret.
func auditArgs(req any) []slog.Attr {
	m, ok := req.(proto.Message)
	if !ok || m == nil {
		return nil
	}
	var out []slog.Attr
	m.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.Kind() == protoreflect.BytesKind || fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind || fd.IsMap():
		case fd.IsList():
			l := v.List()
			items := make([]any, 0, min(l.Len(), maxAuditList))
			for i := 0; i < l.Len() && i < maxAuditList; i++ {
				items = append(items, auditValue(fd, l.Get(i)))
			}
			out = append(out, slog.Any(string(fd.Name()), items))
		default:
			out = append(out, slog.Any(string(fd.Name()), auditValue(fd, v)))
		}
		return true
	})
	return out
}

func auditValue(fd protoreflect.FieldDescriptor, v protoreflect.Value) any {
	switch fd.Kind() {
	case protoreflect.StringKind:
		s := v.String()
		if len(s) > maxAuditString {
			s = strings.ToValidUTF8(s[:maxAuditString], "") + "…"
		}
		return s
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			return string(ev.Name())
		}
		return int64(v.Enum())
	}
	return v.Interface()
}
