package ratelimit

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// The shared vectors, generated from include/gcra.h; every 64-bit integer,
// every rate and every growth is a string.
type vectorBucket struct {
	Present     bool   `json:"present"`
	TatUs       string `json:"tat_us"`
	IntervalUs  string `json:"interval_us"`
	LockUntilUs string `json:"lock_until_us"`
	LockUs      string `json:"lock_us"`
}

type vectorDecision struct {
	Allowed        bool   `json:"allowed"`
	Store          bool   `json:"store"`
	Normalised     bool   `json:"normalised"`
	NewTatUs       string `json:"new_tat_us"`
	Remaining      int32  `json:"remaining"`
	RetryKnown     bool   `json:"retry_known"`
	RetryAfterUs   string `json:"retry_after_us"`
	ResetAfterUs   string `json:"reset_after_us"`
	Locked         bool   `json:"locked"`
	LockStarted    bool   `json:"lock_started"`
	NewLockUntilUs string `json:"new_lock_until_us"`
	NewLockUs      string `json:"new_lock_us"`
}

// vectorLockout is the lockout of a step's or a request's limit.
type vectorLockout struct {
	LockoutUs     string `json:"lockout_us"`
	LockoutGrowth string `json:"lockout_growth"`
	LockoutMaxUs  string `json:"lockout_max_us"`
}

type vectors struct {
	MaxTimeUs string `json:"max_time_us"`
	Limits    []struct {
		Rate        string `json:"rate"`
		Burst       int32  `json:"burst"`
		NowUs       string `json:"now_us"`
		Error       string `json:"error"`
		IntervalUs  string `json:"interval_us"`
		ToleranceUs string `json:"tolerance_us"`
	} `json:"limits"`
	LockoutLimits []struct {
		vectorLockout
		NowUs         string `json:"now_us"`
		Error         string `json:"error"`
		ResolvedMaxUs string `json:"resolved_max_us"`
	} `json:"lockout_limits"`
	Sequences []struct {
		Name  string `json:"name"`
		Steps []struct {
			NowUs  string         `json:"now_us"`
			Rate   string         `json:"rate"`
			Burst  int32          `json:"burst"`
			Cost   int32          `json:"cost"`
			Bucket vectorBucket   `json:"bucket"`
			Expect vectorDecision `json:"expect"`
			vectorLockout
		} `json:"steps"`
	} `json:"sequences"`
	TakeAll []struct {
		Name     string `json:"name"`
		NowUs    string `json:"now_us"`
		Requests []struct {
			Rate   string         `json:"rate"`
			Burst  int32          `json:"burst"`
			Cost   int32          `json:"cost"`
			Shadow bool           `json:"shadow"`
			Bucket vectorBucket   `json:"bucket"`
			Expect vectorDecision `json:"expect"`
			vectorLockout
		} `json:"requests"`
		Expect struct {
			Allowed      bool   `json:"allowed"`
			Remaining    int32  `json:"remaining"`
			RetryKnown   bool   `json:"retry_known"`
			RetryAfterUs string `json:"retry_after_us"`
			ResetAfterUs string `json:"reset_after_us"`
			Binding      int    `json:"binding"`
		} `json:"expect"`
	} `json:"take_all"`
}

func loadVectors(t *testing.T) *vectors {
	src := os.Getenv("RL_SRC")
	if src == "" {
		src = filepath.Join("..", "..")
	}
	data, err := os.ReadFile(filepath.Join(src, "test", "vectors", "gcra.json"))
	if err != nil {
		t.Fatalf("the vectors: %v", err)
	}
	var v vectors
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("the vectors: %v", err)
	}
	if len(v.Limits) == 0 || len(v.LockoutLimits) == 0 || len(v.Sequences) == 0 || len(v.TakeAll) == 0 {
		t.Fatalf("the vectors are empty")
	}
	return &v
}

func i64(t *testing.T, s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("not an int64: %q", s)
	}
	return n
}

// double reads a rate or a growth.
func double(t *testing.T, s string) float64 {
	switch s {
	case "NaN":
		return math.NaN()
	case "Infinity":
		return math.Inf(1)
	case "-Infinity":
		return math.Inf(-1)
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("not a double: %q", s)
	}
	return f
}

func bucketOf(t *testing.T, b vectorBucket) gcraBucket {
	return gcraBucket{present: b.Present, tatUs: i64(t, b.TatUs), intervalUs: i64(t, b.IntervalUs),
		lockUntilUs: i64(t, b.LockUntilUs), lockUs: i64(t, b.LockUs)}
}

// limitOf is the limit of a step or a request, with its lockout when
// lockout_us > 0.
func limitOf(t *testing.T, what, rate string, burst int32, lo vectorLockout, now, max int64) gcraLimit {
	l, e := gcraLimitInit(double(t, rate), burst, now, max)
	if e != gcraOK {
		t.Fatalf("%s: %s", what, e.message())
	}
	if lockout := i64(t, lo.LockoutUs); lockout > 0 {
		e = gcraLockoutInit(&l, lockout, double(t, lo.LockoutGrowth), i64(t, lo.LockoutMaxUs), now, max)
		if e != gcraOK {
			t.Fatalf("%s: %s", what, e.message())
		}
	}
	return l
}

func sameDecision(t *testing.T, what string, got gcraDecision, want vectorDecision) {
	w := gcraDecision{allowed: want.Allowed, store: want.Store, normalised: want.Normalised,
		newTatUs: i64(t, want.NewTatUs), remaining: want.Remaining, retryKnown: want.RetryKnown,
		retryAfterUs: i64(t, want.RetryAfterUs), resetAfterUs: i64(t, want.ResetAfterUs),
		locked: want.Locked, lockStarted: want.LockStarted,
		newLockUntilUs: i64(t, want.NewLockUntilUs), newLockUs: i64(t, want.NewLockUs)}
	if got != w {
		t.Errorf("%s: got %+v, gcra.h decides %+v", what, got, w)
	}
}

var errorNames = map[gcraError]string{gcraOK: "ok", gcraBadRate: "bad_rate",
	gcraBadBurst: "bad_burst", gcraBadCost: "bad_cost", gcraToleranceTooLarge: "tolerance_too_large",
	gcraBadLockout: "bad_lockout"}

func TestVectorsLimits(t *testing.T) {
	v := loadVectors(t)
	max := i64(t, v.MaxTimeUs)
	for i, c := range v.Limits {
		l, e := gcraLimitInit(double(t, c.Rate), c.Burst, i64(t, c.NowUs), max)
		if errorNames[e] != c.Error {
			t.Errorf("limit %d (rate %s, burst %d): %s, gcra.h says %s", i, c.Rate, c.Burst, errorNames[e], c.Error)
			continue
		}
		if e == gcraOK && (l.intervalUs != i64(t, c.IntervalUs) || l.toleranceUs != i64(t, c.ToleranceUs)) {
			t.Errorf("limit %d: T %d tau %d, gcra.h says %s %s", i, l.intervalUs, l.toleranceUs, c.IntervalUs, c.ToleranceUs)
		}
	}
}

// TestVectorsLockoutLimits applies each lockout to rate 1, burst 1 at its
// now, as the vectors do.
func TestVectorsLockoutLimits(t *testing.T) {
	v := loadVectors(t)
	max := i64(t, v.MaxTimeUs)
	for i, c := range v.LockoutLimits {
		now := i64(t, c.NowUs)
		l, e := gcraLimitInit(1, 1, now, max)
		if e != gcraOK {
			t.Fatalf("lockout limit %d: %s", i, e.message())
		}
		lockout, growth := i64(t, c.LockoutUs), double(t, c.LockoutGrowth)
		e = gcraLockoutInit(&l, lockout, growth, i64(t, c.LockoutMaxUs), now, max)
		if errorNames[e] != c.Error {
			t.Errorf("lockout limit %d (lockout %s, growth %s, max %s): %s, gcra.h says %s",
				i, c.LockoutUs, c.LockoutGrowth, c.LockoutMaxUs, errorNames[e], c.Error)
			continue
		}
		if e == gcraOK && (l.lockoutUs != lockout || l.lockoutGrowth != growth ||
			l.lockoutMaxUs != i64(t, c.ResolvedMaxUs)) {
			t.Errorf("lockout limit %d: lockout %d growth %v max %d, gcra.h says %s %s %s",
				i, l.lockoutUs, l.lockoutGrowth, l.lockoutMaxUs, c.LockoutUs, c.LockoutGrowth, c.ResolvedMaxUs)
		}
	}
}

func TestVectorsSequences(t *testing.T) {
	v := loadVectors(t)
	max := i64(t, v.MaxTimeUs)
	steps, locking := 0, 0
	for _, s := range v.Sequences {
		for i, st := range s.Steps {
			now := i64(t, st.NowUs)
			what := s.Name + " step " + strconv.Itoa(i)
			l := limitOf(t, what, st.Rate, st.Burst, st.vectorLockout, now, max)
			b := bucketOf(t, st.Bucket)
			sameDecision(t, what, gcraDecide(&l, &b, now, st.Cost), st.Expect)
			steps++
			if l.lockoutUs > 0 {
				locking++
			}
		}
	}
	t.Logf("%d sequences, %d steps, %d under a lockout", len(v.Sequences), steps, locking)
}

func TestVectorsTakeAll(t *testing.T) {
	v := loadVectors(t)
	max := i64(t, v.MaxTimeUs)
	for _, c := range v.TakeAll {
		now := i64(t, c.NowUs)
		reqs := make([]gcraRequest, len(c.Requests))
		for i, r := range c.Requests {
			l := limitOf(t, c.Name+" request "+strconv.Itoa(i), r.Rate, r.Burst, r.vectorLockout, now, max)
			reqs[i] = gcraRequest{limit: l, bucket: bucketOf(t, r.Bucket), cost: r.Cost, shadow: r.Shadow}
		}
		d := make([]gcraDecision, len(reqs))
		got := gcraDecideAll(reqs, now, d)
		for i, r := range c.Requests {
			sameDecision(t, c.Name+" request "+strconv.Itoa(i), d[i], r.Expect)
		}
		want := gcraCombined{allowed: c.Expect.Allowed, remaining: c.Expect.Remaining,
			retryKnown: c.Expect.RetryKnown, retryAfterUs: i64(t, c.Expect.RetryAfterUs),
			resetAfterUs: i64(t, c.Expect.ResetAfterUs), binding: c.Expect.Binding}
		if got != want {
			t.Errorf("%s: got %+v, gcra.h answers %+v", c.Name, got, want)
		}
	}
}

// TestBucketForgotten checks gcraBucketForgotten, which the vectors do not
// carry, on the cases of test/unit/gcra_test.c.
func TestBucketForgotten(t *testing.T) {
	const sec = int64(1000000)
	now, T := 10*sec, 60*sec
	for _, c := range []struct {
		what string
		b    gcraBucket
		want bool
	}{
		{"forgotten once tat and lock_until + lock_us have passed",
			gcraBucket{true, now, T, now - 900*sec, 900 * sec}, true},
		{"not forgotten while a new offence would grow the lockout",
			gcraBucket{true, now, T, now - 899*sec, 900 * sec}, false},
		{"not forgotten while tat is ahead",
			gcraBucket{true, now + 1, T, now - 900*sec, 900 * sec}, false},
		{"an absent bucket is forgotten", gcraBucket{}, true},
	} {
		if got := gcraBucketForgotten(&c.b, now); got != c.want {
			t.Errorf("%s: got %v", c.what, got)
		}
	}
}
