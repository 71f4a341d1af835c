package apps

import (
	"strings"

	"github.com/spoolmq/spool/sidecar/config"
)

// Match reports whether name matches pattern: the same string, or, for a
// pattern ending in "*", a name starting with what precedes the star ("*"
// alone matches every name). Nothing else is special: topic and group names
// cannot hold "*".
func Match(pattern, name string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(name, prefix)
	}
	return pattern == name
}

// subPattern is one entry of a subscribe list: a topic pattern and a group
// pattern ("*" when the entry names no group).
type subPattern struct{ topic, group string }

// scopes is what one identity may do; a nil list allows everything.
type scopes struct {
	publish   []string
	subscribe []subPattern
	anyPub    bool
	anySub    bool
}

// Policy holds every identity's scopes (apps.identities).
type Policy struct {
	byID  map[string]*scopes
	other *scopes // the "*" entry, for identities not listed; nil: all allowed
}

// NewPolicy builds the scopes of a validated apps section.
func NewPolicy(a *config.AppsConfig) *Policy {
	p := &Policy{byID: map[string]*scopes{}}
	for _, id := range a.Identities {
		s := &scopes{anyPub: id.Publish == nil, anySub: id.Subscribe == nil}
		if id.Publish != nil {
			s.publish = append([]string{}, *id.Publish...)
		}
		if id.Subscribe != nil {
			for _, e := range *id.Subscribe {
				t, g, ok := strings.Cut(e, ":")
				if !ok {
					g = "*"
				}
				s.subscribe = append(s.subscribe, subPattern{t, g})
			}
		}
		if id.Name == config.AnyAppIdentity {
			p.other = s
		} else {
			p.byID[id.Name] = s
		}
	}
	return p
}

func (p *Policy) of(id string) *scopes {
	if s, ok := p.byID[id]; ok {
		return s
	}
	return p.other
}

// CanPublish reports whether identity id may publish to topic.
func (p *Policy) CanPublish(id, topic string) bool {
	s := p.of(id)
	if s == nil || s.anyPub {
		return true
	}
	for _, pat := range s.publish {
		if Match(pat, topic) {
			return true
		}
	}
	return false
}

// CanSubscribe reports whether identity id may consume topic as group.
func (p *Policy) CanSubscribe(id, topic, group string) bool {
	s := p.of(id)
	if s == nil || s.anySub {
		return true
	}
	for _, pat := range s.subscribe {
		if Match(pat.topic, topic) && Match(pat.group, group) {
			return true
		}
	}
	return false
}
