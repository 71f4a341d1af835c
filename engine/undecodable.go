package engine

// HeaderUndecodable marks a record that a backend read from its broker but
// could not decode (on JetStream: a message on a partition's subject that
// is no Spool record, such as a plain NATS publish). The record's value is
// the message's raw bytes, its id one derived from where it is stored, and
// this header, its only one, says what was wrong. Delivery dead-letters
// such a record at once with the reason "undecodable_record: <what>",
// without handing it to the app or charging an attempt; the partition goes
// on. docs/backends.md ("Records Spool did not write").
const HeaderUndecodable = "spool-undecodable"
