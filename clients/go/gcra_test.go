package ratelimit

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// The shared vectors, generated from include/gcra.h; every 64-bit integer
// and every rate is a string.
type vectorBucket struct {
	Present    bool   `json:"present"`
	TatUs      string `json:"tat_us"`
	IntervalUs string `json:"interval_us"`
}

type vectorDecision struct {
	Allowed      bool   `json:"allowed"`
	Store        bool   `json:"store"`
	Normalised   bool   `json:"normalised"`
	NewTatUs     string `json:"new_tat_us"`
	Remaining    int32  `json:"remaining"`
	RetryKnown   bool   `json:"retry_known"`
	RetryAfterUs string `json:"retry_after_us"`
	ResetAfterUs string `json:"reset_after_us"`
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
	Sequences []struct {
		Name  string `json:"name"`
		Steps []struct {
			NowUs  string         `json:"now_us"`
			Rate   string         `json:"rate"`
			Burst  int32          `json:"burst"`
			Cost   int32          `json:"cost"`
			Bucket vectorBucket   `json:"bucket"`
			Expect vectorDecision `json:"expect"`
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
	if len(v.Limits) == 0 || len(v.Sequences) == 0 || len(v.TakeAll) == 0 {
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

func rate(t *testing.T, s string) float64 {
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
		t.Fatalf("not a rate: %q", s)
	}
	return f
}

func bucketOf(t *testing.T, b vectorBucket) gcraBucket {
	return gcraBucket{present: b.Present, tatUs: i64(t, b.TatUs), intervalUs: i64(t, b.IntervalUs)}
}

func sameDecision(t *testing.T, what string, got gcraDecision, want vectorDecision) {
	w := gcraDecision{allowed: want.Allowed, store: want.Store, normalised: want.Normalised,
		newTatUs: i64(t, want.NewTatUs), remaining: want.Remaining, retryKnown: want.RetryKnown,
		retryAfterUs: i64(t, want.RetryAfterUs), resetAfterUs: i64(t, want.ResetAfterUs)}
	if got != w {
		t.Errorf("%s: got %+v, gcra.h decides %+v", what, got, w)
	}
}

var errorNames = map[gcraError]string{gcraOK: "ok", gcraBadRate: "bad_rate",
	gcraBadBurst: "bad_burst", gcraBadCost: "bad_cost", gcraToleranceTooLarge: "tolerance_too_large"}

func TestVectorsLimits(t *testing.T) {
	v := loadVectors(t)
	max := i64(t, v.MaxTimeUs)
	for i, c := range v.Limits {
		l, e := gcraLimitInit(rate(t, c.Rate), c.Burst, i64(t, c.NowUs), max)
		if errorNames[e] != c.Error {
			t.Errorf("limit %d (rate %s, burst %d): %s, gcra.h says %s", i, c.Rate, c.Burst, errorNames[e], c.Error)
			continue
		}
		if e == gcraOK && (l.intervalUs != i64(t, c.IntervalUs) || l.toleranceUs != i64(t, c.ToleranceUs)) {
			t.Errorf("limit %d: T %d tau %d, gcra.h says %s %s", i, l.intervalUs, l.toleranceUs, c.IntervalUs, c.ToleranceUs)
		}
	}
}

func TestVectorsSequences(t *testing.T) {
	v := loadVectors(t)
	max := i64(t, v.MaxTimeUs)
	steps := 0
	for _, s := range v.Sequences {
		for i, st := range s.Steps {
			now := i64(t, st.NowUs)
			l, e := gcraLimitInit(rate(t, st.Rate), st.Burst, now, max)
			if e != gcraOK {
				t.Fatalf("%s step %d: %s", s.Name, i, e.message())
			}
			b := bucketOf(t, st.Bucket)
			sameDecision(t, s.Name+" step "+strconv.Itoa(i), gcraDecide(&l, &b, now, st.Cost), st.Expect)
			steps++
		}
	}
	t.Logf("%d sequences, %d steps", len(v.Sequences), steps)
}

func TestVectorsTakeAll(t *testing.T) {
	v := loadVectors(t)
	max := i64(t, v.MaxTimeUs)
	for _, c := range v.TakeAll {
		now := i64(t, c.NowUs)
		reqs := make([]gcraRequest, len(c.Requests))
		for i, r := range c.Requests {
			l, e := gcraLimitInit(rate(t, r.Rate), r.Burst, now, max)
			if e != gcraOK {
				t.Fatalf("%s request %d: %s", c.Name, i, e.message())
			}
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
