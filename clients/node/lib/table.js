'use strict';
// The bounded key table: at most max entries, a min-heap on the time at
// which an entry's buckets are all full again (such an entry is the same as
// an absent one, so it makes room first), and least-recently-used order
// (a Map keeps insertion order: an entry used is moved to its end).

const NEVER = -(1n << 63n);	// a bucket that is absent: full since ever
const PINNED = (1n << 63n) - 1n;

// lockUntilUs and lockUs 0n: never locked
const emptyBucket = () => ({ present: false, tatUs: 0n, intervalUs: 0n, lockUntilUs: 0n, lockUs: 0n });

class KeyTable {
  constructor(max) {
    this.max = max;
    this.byId = new Map();
    this.heap = [];
    this.evictions = 0;
  }

  get count() { return this.heap.length; }

  // The time from which the first entry is full again (the table is not empty).
  firstFullAt() { return this.heap[0].fullAt; }

  find(id) { return this.byId.get(id) ?? null; }

  // The entry of id, most recently used now; made when absent and there is
  // room, forgetting an entry that is full again or, when evictLive, the
  // least recently used one.  null when there is no room.
  get(id, nowUs, evictLive) {
    let e = this.byId.get(id);
    if (e !== undefined) {
      this.byId.delete(id);
      this.byId.set(id, e);
      return e;
    }
    if (!this.makeRoom(nowUs, evictLive)) return null;
    e = { id, heapPos: this.heap.length, fullAt: NEVER, pinned: false,
      precheck: emptyBucket(), memory: emptyBucket() };
    this.byId.set(id, e);
    this.heap.push(e);
    this.fix(e);
    return e;
  }

  makeRoom(nowUs, evictLive) {
    if (this.heap.length < this.max) return true;
    let victim = null;
    if (this.heap[0].fullAt <= nowUs) victim = this.heap[0];
    else if (evictLive) {
      const oldest = this.byId.values().next().value;
      if (!oldest.pinned) victim = oldest;
    }
    if (victim === null) return false;
    this.byId.delete(victim.id);
    const last = this.heap.pop();
    if (last !== victim) {
      this.put(victim.heapPos, last);
      this.fix(last);
    }
    this.evictions++;
    return true;
  }

  // Set one bucket of e ('precheck' or 'memory').
  set(e, which, tatUs, intervalUs, lockUntilUs, lockUs) {
    Object.assign(e[which], { present: true, tatUs, intervalUs, lockUntilUs, lockUs });
    this.refresh(e);
  }

  // A pinned entry is in use by a multi-limit call: never the one to go.
  pin(e, pinned) {
    e.pinned = pinned;
    this.refresh(e);
  }

  refresh(e) {
    // full again once gcra_bucket_forgotten: a lockout's length is kept
    // for as long as a new offence would grow from it
    const full = (b) => {
      if (!b.present) return NEVER;
      const lockEnd = b.lockUntilUs + b.lockUs;
      return b.tatUs > lockEnd ? b.tatUs : lockEnd;
    };
    const a = full(e.precheck);
    const m = full(e.memory);
    e.fullAt = e.pinned ? PINNED : a > m ? a : m;
    this.fix(e);
  }

  put(pos, e) {
    this.heap[pos] = e;
    e.heapPos = pos;
  }

  fix(e) {
    const h = this.heap;
    let pos = e.heapPos;
    while (pos > 0 && h[(pos - 1) >> 1].fullAt > e.fullAt) {
      this.put(pos, h[(pos - 1) >> 1]);
      pos = (pos - 1) >> 1;
    }
    for (;;) {
      let child = 2 * pos + 1;
      if (child >= h.length) break;
      if (child + 1 < h.length && h[child + 1].fullAt < h[child].fullAt) child++;
      if (h[child].fullAt >= e.fullAt) break;
      this.put(pos, h[child]);
      pos = child;
    }
    this.put(pos, e);
  }
}

module.exports = { KeyTable };
