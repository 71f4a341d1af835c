package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// clockTicks is USER_HZ (`getconf CLK_TCK`), 100 on Linux.
const clockTicks = 100

// procCPU returns utime+stime of pid in clock ticks, from /proc/<pid>/stat.
func procCPU(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces: fields count from after ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no ')'", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); utime is field 14, stime field 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: bad utime/stime %q %q", pid, f[11], f[12])
	}
	return ut + st, nil
}

// procMem returns VmRSS and VmHWM of pid in KiB, from /proc/<pid>/status.
func procMem(pid int) (rssKiB, hwmKiB int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		var dst *int64
		switch {
		case strings.HasPrefix(line, "VmRSS:"):
			dst = &rssKiB
		case strings.HasPrefix(line, "VmHWM:"):
			dst = &hwmKiB
		default:
			continue
		}
		f := strings.Fields(line)
		if len(f) >= 2 {
			*dst, _ = strconv.ParseInt(f[1], 10, 64)
		}
	}
	return rssKiB, hwmKiB, nil
}

// sampler reads the memory of the spoold processes (one, or every node of
// a cluster) every interval: RSS and VmHWM summed over them.
type sampler struct {
	pids func() []int // read at each sample: a cluster node may have been restarted
	stop chan struct{}
	done chan struct{}

	mu         sync.Mutex
	rssPeakKiB int64
	hwmKiB     int64
	samples    int
}

func startSampler(pids func() []int, every time.Duration) *sampler {
	s := &sampler{pids: pids, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			s.sample()
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *sampler) sample() {
	var rss, hwm int64
	for _, pid := range s.pids() {
		r, h, err := procMem(pid)
		if err != nil {
			continue // a node being restarted
		}
		_, _ = procCPU(pid) // keep the sampling cost representative; the phase totals are read at its bounds
		rss, hwm = rss+r, hwm+h
	}
	s.mu.Lock()
	s.rssPeakKiB = max(s.rssPeakKiB, rss)
	s.hwmKiB = max(s.hwmKiB, hwm)
	s.samples++
	s.mu.Unlock()
}

// reset forgets the peak so far (call when the measured phase starts).
func (s *sampler) reset() {
	s.mu.Lock()
	s.rssPeakKiB = 0
	s.mu.Unlock()
}

// snapshot takes a last sample and returns the peak RSS since reset.
func (s *sampler) snapshot() int64 {
	s.sample()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rssPeakKiB
}

func (s *sampler) close() {
	s.sample()
	close(s.stop)
	<-s.done
}

func (s *sampler) peakKiB() (rss, hwm int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rssPeakKiB, s.hwmKiB
}
