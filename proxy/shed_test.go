package proxy

import (
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
)

// Past MaxConns open connections skewgate sheds, and goes on shedding
// until fewer than 80 % of them remain.
func TestLoadShedsAtTheConnectionBound(t *testing.T) {
	l := &Load{MaxConns: 10}
	// Connections as Admission counts them once their callers proved
	// who they are (TestPendingConnectionsNeverShed: the others never
	// count).
	dial := func(n int) { l.conns.Add(int64(n)) }
	closeTo := func(n int) { l.conns.Store(int64(n)) }
	dial(9)
	if why := l.Shedding(); why != "" {
		t.Fatalf("9 of 10 connections: shedding (%s)", why)
	}
	dial(1)
	if why := l.Shedding(); !strings.Contains(why, "10 client connections") {
		t.Fatalf("10 of 10 connections: %q, want shedding", why)
	}
	closeTo(8)
	if why := l.Shedding(); why == "" {
		t.Fatal("8 of 10, after shedding began: stopped shedding, want it to go on until under 80 %")
	}
	closeTo(7)
	if why := l.Shedding(); why != "" {
		t.Fatalf("7 of 10: still shedding (%s)", why)
	}
	if n := l.Episodes(); n != 1 {
		t.Fatalf("one episode (begun at 10 connections, on at 8, over at 7): %d counted, want 1", n)
	}
	dial(3)
	l.Shedding()
	if n := l.Episodes(); n != 2 {
		t.Fatalf("shedding began again: %d episodes counted, want 2", n)
	}
}

// Past 90 % of the soft memory limit skewgate sheds too.
func TestLoadShedsNearTheMemoryLimit(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(prev)
	l := &Load{}
	debug.SetMemoryLimit(1 << 40)
	if why := l.Shedding(); why != "" {
		t.Fatalf("far under the limit: %q", why)
	}
	ballast := make([]byte, 64<<20)
	ballast[len(ballast)-1] = 1
	debug.SetMemoryLimit(int64(memoryInUse()) / 2)
	why := l.Shedding()
	debug.SetMemoryLimit(prev)
	if !strings.Contains(why, "soft memory limit") {
		t.Fatalf("heap over the limit: %q, want shedding", why)
	}
	_ = ballast[len(ballast)-1]
}

// Goroutine stacks count toward the bound: idle connections hold little
// heap and two or more goroutines each.
func TestMemoryInUseCountsStacks(t *testing.T) {
	runtime.GC() // heap objects: live ones only, before and after
	before := memoryInUse()
	stop := make(chan struct{})
	var started sync.WaitGroup
	for range 2000 {
		started.Add(1)
		go deepStack(64, &started, stop)
	}
	started.Wait()
	runtime.GC()
	grown := int64(memoryInUse()) - int64(before)
	close(stop)
	// 2000 stacks of 64 frames of 256 bytes: 32 MiB at least.
	if grown < 24<<20 {
		t.Fatalf("2000 goroutines with 32 KiB stacks grew the measure by %d KiB", grown>>10)
	}
}

func deepStack(depth int, started *sync.WaitGroup, stop chan struct{}) byte {
	var pad [256]byte
	pad[depth%256] = byte(depth)
	if depth == 0 {
		started.Done()
		<-stop
		return pad[0]
	}
	return deepStack(depth-1, started, stop) + pad[depth%256]
}
