// Package protocheck holds checks shared by the decoders of replicated
// state (engine/meta, engine/groups/coord): every node must apply the same
// commands, so a message carrying fields this release does not know is
// refused rather than applied without them.
package protocheck

import (
	"errors"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// UnknownFields refuses a message holding fields this release does not
// know, at any depth.
func UnknownFields(m protoreflect.Message) error {
	if len(m.GetUnknown()) > 0 {
		return errors.New("fields this release does not know (written by a newer release? upgrade this node)")
	}
	var err error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			l := v.List()
			for i := 0; i < l.Len() && err == nil; i++ {
				err = UnknownFields(l.Get(i).Message())
			}
		case fd.Message() != nil && !fd.IsMap():
			err = UnknownFields(v.Message())
		}
		return err == nil
	})
	return err
}
