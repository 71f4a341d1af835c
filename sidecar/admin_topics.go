package sidecar

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/internal/atomicfile"
	"github.com/spoolmq/spool/sidecar/apierr"
	"github.com/spoolmq/spool/sidecar/config"
)

// Topics made through AdminService (spool topic create) rather than
// declared in spoold's config.
//
// In a cluster the controller keeps every topic, so nothing more is needed.
// On a single node the engine opens only the topics it is told about at
// start, so spoold keeps the ones it created in a small catalogue in its
// data dir (createdTopicsFile) and opens them again at the next start,
// after the config's topics. A topic the config declares is the config's:
// AlterTopic and DeleteTopic refuse it (the next start would undo them).

// createdTopicsFile is the catalogue's name in node.data_dir.
const createdTopicsFile = "admin-topics.json"

// createdTopic is one catalogue entry.
type createdTopic struct {
	Name           string `json:"name"`
	Partitions     int32  `json:"partitions"`
	RetentionMs    int64  `json:"retention_ms"`
	RetentionBytes int64  `json:"retention_bytes"`
}

func (t createdTopic) spec() engine.TopicSpec {
	return engine.TopicSpec{Name: t.Name, Partitions: t.Partitions, RetentionAge: time.Duration(t.RetentionMs) * time.Millisecond, RetentionBytes: t.RetentionBytes}
}

// topicCatalog is the catalogue file; path "" keeps nothing (a cluster).
// mu serializes the changes of AdminService's topic calls.
type topicCatalog struct {
	path string
	mu   sync.Mutex
}

func newTopicCatalog(dataDir string, clustered bool) *topicCatalog {
	if clustered || dataDir == "" {
		return &topicCatalog{}
	}
	return &topicCatalog{path: filepath.Join(dataDir, createdTopicsFile)}
}

func (c *topicCatalog) load() ([]createdTopic, error) {
	if c.path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(c.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the topics created through spool (%s): %w", c.path, err)
	}
	var ts []createdTopic
	if err := json.Unmarshal(b, &ts); err != nil {
		return nil, fmt.Errorf("the topics created through spool (%s) are not readable: %w; fix or remove the file (the topics' data stays in the data dir; declare them in the config instead)", c.path, err)
	}
	return ts, nil
}

// put adds or replaces t and writes the catalogue durably (a temporary
// file, fsynced, renamed, and the directory fsynced).
func (c *topicCatalog) put(t createdTopic) error {
	return c.update(t.Name, &t)
}

// remove deletes the entry of a topic (none: nothing changes).
func (c *topicCatalog) remove(name string) error {
	return c.update(name, nil)
}

// update replaces the entry named name by t (nil: removes it).
func (c *topicCatalog) update(name string, t *createdTopic) error {
	if c.path == "" {
		return nil
	}
	ts, err := c.load()
	if err != nil {
		return err
	}
	ts = slices.DeleteFunc(ts, func(x createdTopic) bool { return x.Name == name })
	if t != nil {
		ts = append(ts, *t)
	}
	slices.SortFunc(ts, func(a, b createdTopic) int { return strings.Compare(a.Name, b.Name) })
	b, err := json.MarshalIndent(ts, "", "  ")
	if err != nil {
		return err
	}
	return writeFileSynced(c.path, append(b, '\n'))
}

// writeFileSynced replaces the catalogue durably (internal/atomicfile: a
// crash leaves the old catalogue or the new one).
func writeFileSynced(path string, b []byte) error {
	if err := atomicfile.WriteFile(path, b); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// openCreatedTopics opens the topics of the catalogue that the config does
// not declare (the config's settings win for those it does).
func openCreatedTopics(cfg *config.Config, eng engine.Backend, c *topicCatalog) error {
	ts, err := c.load()
	if err != nil {
		return err
	}
	for _, t := range ts {
		if declaredTopic(cfg, t.Name) {
			continue
		}
		if err := eng.EnsureTopic(t.spec()); err != nil {
			return fmt.Errorf("opening topic %q (created through spool, kept in %s): %w", t.Name, c.path, err)
		}
	}
	return nil
}

// declaredTopic: the config declares the topic, or it is the dead-letter
// topic of a declared subscription.
func declaredTopic(cfg *config.Config, name string) bool {
	for _, t := range cfg.AllTopics() {
		if t.Name == name {
			return true
		}
	}
	return false
}

// usersOf names the subscriptions that read topic or dead-letter to it.
func usersOf(cfg *config.Config, topic string) []string {
	var out []string
	for i := range cfg.Subscriptions {
		s := &cfg.Subscriptions[i]
		switch {
		case s.Topic == topic:
			out = append(out, s.Topic+"/"+s.Group)
		case s.DLQTopic() == topic:
			out = append(out, s.Topic+"/"+s.Group+" (dead letters)")
		}
	}
	return out
}

// checkTopicSpec refuses settings no topic can have.
func checkTopicSpec(name string, partitions int32, retentionMs, retentionBytes int64) error {
	const rule = "topic names are 1 to %d bytes of a-z A-Z 0-9 . _ -, not starting with __"
	switch {
	case name == "":
		return apierr.New(apierr.TopicRequired, "name the topic")
	case len(name) > config.MaxNameBytes || !config.ValidNameBytes(name) || strings.HasPrefix(name, "__") || name == "." || name == "..":
		return apierr.New(apierr.InvalidTopicName, "topic name %q is not allowed ("+rule+"): choose another", clipName(name), config.MaxNameBytes)
	case partitions < 1 || partitions > config.MaxPartitions:
		return apierr.New(apierr.InvalidTopicSpec, "topic %s: %d partitions: use 1..%d", name, partitions, config.MaxPartitions)
	case retentionMs < 0:
		return apierr.New(apierr.InvalidTopicSpec, "topic %s: retention of %d ms: use 0 (keep forever) or more", name, retentionMs)
	case retentionBytes < 0:
		return apierr.New(apierr.InvalidTopicSpec, "topic %s: retention of %d bytes: use 0 (unlimited) or more", name, retentionBytes)
	}
	return nil
}

func clipName(s string) string {
	if len(s) > 32 {
		return s[:32] + "..."
	}
	return s
}
