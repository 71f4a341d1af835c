//go:build !spoolfaults

package wallclock

const faultsBuilt = false

func offsetMs() int64 { return 0 }
