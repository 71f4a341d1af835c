// Package dlq reads a subscription's dead-letter topic (Peek) and redrives
// its entries (Redrive): back to the original partition of the original
// topic, marked so that only the group that dead-lettered them delivers
// them, with their ledger entries reset so that they get max_attempts
// fresh attempts — unless the ledger shows the message was handled since.
package dlq
