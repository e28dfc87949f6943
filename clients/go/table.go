// The bounded key table: a map by keyed hash, a min-heap on the time each
// entry's buckets are full again, and a least-recently-used list, as the C
// client keeps them (include/ratelimit_client.h).

package ratelimit

import "math"

// entry is one (limiter, key) in memory, known by a keyed hash only: no key
// text is kept.
type entry struct {
	id           [2]uint64
	newer, older *entry
	fullAtUs     int64 // both buckets are full again from then
	heapPos      int
	pinned       bool       // in use by a multi-limit call: kept
	precheck     gcraBucket // this process's round trips, 2 x burst
	memory       gcraBucket // the database's last answer, continued
}

type table struct {
	entries   map[[2]uint64]*entry
	heap      []*entry
	max       int
	newest    *entry
	oldest    *entry
	evictions uint64
}

func newTable(max int) *table {
	return &table{entries: make(map[[2]uint64]*entry), max: max}
}

func (t *table) heapPut(pos int, e *entry) {
	t.heap[pos] = e
	e.heapPos = pos
}

// heapFix moves e to its place in the heap after its fullAtUs changed.
func (t *table) heapFix(e *entry) {
	pos := e.heapPos
	for pos > 0 && t.heap[(pos-1)/2].fullAtUs > e.fullAtUs {
		t.heapPut(pos, t.heap[(pos-1)/2])
		pos = (pos - 1) / 2
	}
	for {
		child := 2*pos + 1
		if child >= len(t.heap) {
			break
		}
		if child+1 < len(t.heap) && t.heap[child+1].fullAtUs < t.heap[child].fullAtUs {
			child++
		}
		if t.heap[child].fullAtUs >= e.fullAtUs {
			break
		}
		t.heapPut(pos, t.heap[child])
		pos = child
	}
	t.heapPut(pos, e)
}

func (t *table) lruUnlink(e *entry) {
	if e.newer != nil {
		e.newer.older = e.older
	} else {
		t.newest = e.older
	}
	if e.older != nil {
		e.older.newer = e.newer
	} else {
		t.oldest = e.newer
	}
}

func (t *table) lruPush(e *entry) {
	e.newer = nil
	e.older = t.newest
	if t.newest != nil {
		t.newest.newer = e
	} else {
		t.oldest = e
	}
	t.newest = e
}

// makeRoom makes room for one entry: it forgets one that is full again (the
// same as an absent one: nothing is lost), or else, when evictLive, the
// least recently used.  False when there is no room to make.
func (t *table) makeRoom(nowUs int64, evictLive bool) bool {
	if len(t.heap) < t.max {
		return true
	}
	var victim *entry
	switch {
	case t.heap[0].fullAtUs <= nowUs:
		victim = t.heap[0]
	case evictLive && !t.oldest.pinned:
		victim = t.oldest
	default:
		return false
	}
	delete(t.entries, victim.id)
	t.lruUnlink(victim)
	last := t.heap[len(t.heap)-1]
	t.heap = t.heap[:len(t.heap)-1]
	if last != victim {
		t.heapPut(victim.heapPos, last)
		t.heapFix(last)
	}
	t.evictions++
	return true
}

// get finds or creates the entry id, most recently used now; nil when it is
// absent and there is no room for it.
func (t *table) get(id [2]uint64, nowUs int64, evictLive bool) *entry {
	if e := t.entries[id]; e != nil {
		t.lruUnlink(e)
		t.lruPush(e)
		return e
	}
	if !t.makeRoom(nowUs, evictLive) {
		return nil
	}
	e := &entry{id: id, fullAtUs: math.MinInt64}
	t.entries[id] = e
	t.lruPush(e)
	t.heap = append(t.heap, e)
	e.heapPos = len(t.heap) - 1
	t.heapFix(e)
	return e
}

func bucketFullAt(b *gcraBucket) int64 {
	if !b.present {
		return math.MinInt64
	}
	// a lock is kept until forgiven, as gcraBucketForgotten says
	if b.tatUs > b.lockUntilUs+b.lockUs {
		return b.tatUs
	}
	return b.lockUntilUs + b.lockUs
}

// fix puts e in its place in the heap: by when both buckets are full again,
// or last while pinned, so that making room for another entry of the same
// call never forgets it.
func (t *table) fix(e *entry) {
	e.fullAtUs = bucketFullAt(&e.precheck)
	if m := bucketFullAt(&e.memory); m > e.fullAtUs {
		e.fullAtUs = m
	}
	if e.pinned {
		e.fullAtUs = math.MaxInt64
	}
	t.heapFix(e)
}

func (t *table) set(e *entry, b *gcraBucket, tatUs, intervalUs int64) {
	*b = gcraBucket{present: true, tatUs: tatUs, intervalUs: intervalUs}
	t.fix(e)
}

func (t *table) pin(e *entry, pinned bool) {
	e.pinned = pinned
	t.fix(e)
}
