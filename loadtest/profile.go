package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"time"
)

// profileSpec asks for profiles of spoold: none when Dir is empty.
type profileSpec struct {
	Dir string
	// CPUSeconds is the length of the CPU profile (0: defaultCPUSeconds).
	// pprof's endpoint profiles for a fixed time, so it covers the first
	// CPUSeconds of the measured phase; a run at a moderate rate needs a
	// longer one than the default for enough samples.
	CPUSeconds int
}

// defaultCPUSeconds is the CPU profile's length unless --profile-seconds says.
const defaultCPUSeconds = 5

// profiler fetches pprof profiles from spoold's admin port: a CPU profile
// of the first cpuSeconds of the measured phase and a heap profile at its
// end. It also profiles the loadtest process itself over the same
// seconds (NAME.loadtest.cpu.pprof): the Go SDK's consumers and the
// publishers run in it.
type profiler struct {
	addr, dir, name string
	cpuSeconds      int
	cpuDone         chan error
	selfDone        chan error
}

func newProfiler(addr string, spec profileSpec, name string) *profiler {
	secs := spec.CPUSeconds
	if secs <= 0 {
		secs = defaultCPUSeconds
	}
	return &profiler{addr: addr, dir: spec.Dir, name: name, cpuSeconds: secs}
}

func (p *profiler) startCPU() {
	if p.addr == "" {
		return
	}
	p.cpuDone = make(chan error, 1)
	go func() {
		p.cpuDone <- p.fetch(fmt.Sprintf("/debug/pprof/profile?seconds=%d", p.cpuSeconds), p.name+".cpu.pprof", p.cpuSeconds+10)
	}()
	p.selfDone = make(chan error, 1)
	go func() { p.selfDone <- p.profileSelf() }()
}

// profileSelf writes the loadtest process's CPU profile of cpuSeconds.
func (p *profiler) profileSelf() error {
	if err := os.MkdirAll(p.dir, 0o755); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(p.dir, p.name+".loadtest.cpu.pprof"))
	if err != nil {
		return err
	}
	defer f.Close()
	if err := pprof.StartCPUProfile(f); err != nil {
		return fmt.Errorf("profile of the loadtest process: %w", err)
	}
	time.Sleep(time.Duration(p.cpuSeconds) * time.Second) // sleep-ok: the profile's length
	pprof.StopCPUProfile()
	return nil
}

// finish writes the heap profile and waits for the CPU profile.
func (p *profiler) finish() []error {
	if p.addr == "" {
		return nil
	}
	var errs []error
	if err := p.fetch("/debug/pprof/heap", p.name+".heap.pprof", 10); err != nil {
		errs = append(errs, err)
	}
	if p.cpuDone != nil {
		if err := <-p.cpuDone; err != nil {
			errs = append(errs, err)
		}
		p.cpuDone = nil
	}
	if p.selfDone != nil {
		if err := <-p.selfDone; err != nil {
			errs = append(errs, err)
		}
		p.selfDone = nil
	}
	return errs
}

func (p *profiler) fetch(path, file string, timeoutS int) error {
	c := http.Client{Timeout: time.Duration(timeoutS) * time.Second}
	resp, err := c.Get("http://" + p.addr + path)
	if err != nil {
		return fmt.Errorf("profile %s: %w ", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("profile %s: %s", path, resp.Status)
	}
	if err := os.MkdirAll(p.dir, 0o755); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(p.dir, file))
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(f, resp.Body)
	return err
}
