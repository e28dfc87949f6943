'use strict';
// RateLimiter: rate-limit decisions of the ratelimit extension for a Node
// process, with the promises of the C client (include/ratelimit_client.h).
//
// How a decision is made:
//  1. the arguments are checked as rl_take checks them; bad use is a thrown
//     RateLimitUsageError, never a decision;
//  2. while the database is in its backoff after a failure, the in-memory
//     limiter decides (source 'fallback');
//  3. the pre-check, a bucket of twice the burst counting this process's
//     requests to the database, refuses a client far over its limit without
//     a round trip (source 'local'); a client within its limit never fills it;
//  4. the database decides on a pooled connection within the deadline
//     (source 'database'), and its answer is copied into the in-memory
//     limiter, so an outage continues from the shared fill level;
//  5. on a timeout (the query is cancelled and its connection closed) or an
//     error, the in-memory limiter decides (source 'fallback') and the
//     backoff starts: one request per backoff interval tries the database.
// Everything but the database call runs synchronously on the event loop, so
// concurrent calls never see a half-made decision.

const crypto = require('node:crypto');
const gcra = require('./gcra');
const { KeyTable } = require('./table');
const { Pool, Timeout, within } = require('./pool');
const { RateLimitUsageError } = require('./errors');
const { hasLimit, rateAndBurst, INT32_MAX } = require('./limit');

const PG_EPOCH_US = 946684800000000n;
const MAX_REQUESTS = 16;
// limiters whose last warning time is remembered
const MAX_WARNED_LIMITERS = 1024;

const DEFAULTS = {
  schema: null,
  deadlineMs: 250,
  backoffMs: 1000,
  poolSize: 4,
  maxKeys: 100000,
  warningIntervalMs: 60000,
  policyRefreshMs: 10000,
  cancelTimeoutMs: 10000,
  idleTimeoutMs: 10000,
};

// logger's default: the message on the console, without the fields
const CONSOLE = { warn: (fields, message) => console.warn(message) };

// SQLSTATEs that say the call is wrong, not that the database is down.
function isBadUse(code) {
  return typeof code === 'string' && (code === '42501' || code === '42704' || code.startsWith('22'));
}

const nowUs = () => process.hrtime.bigint() / 1000n;
const wallUs = () => BigInt(Date.now()) * 1000n - PG_EPOCH_US;
const seconds = (us) => Number(us) / 1e6;
// seconds as whole ms, rounded up (a wait of retryAfterMs is long enough)
const ceilMs = (s) => (Number.isFinite(s) ? Math.ceil(Math.round(s * 1e6) / 1000) : s);

function quoteIdent(name) {
  return `"${name.replace(/"/g, '""')}".`;
}

// limiter and key, in rl_take's order
function checkName(value, what, limiter) {
  if (value === null || value === undefined) throw new RateLimitUsageError(`${what} must not be null`, '22004', limiter);
  if (typeof value !== 'string') throw new RateLimitUsageError(`${what} must be a string`, '22023', limiter);
  if (!value.isWellFormed() || value.includes('\0')) {
    throw new RateLimitUsageError(`${what} must be valid UTF-8`, '22021', limiter);
  }
  if (value === '') throw new RateLimitUsageError(`${what} must not be empty`, '22023', limiter);
}

function checkNames(limiter, key) {
  // the server refuses a bad encoding before it looks at any value
  for (const [v, what] of [[limiter, 'limiter'], [key, 'key']]) {
    if (typeof v === 'string' && (!v.isWellFormed() || v.includes('\0'))) {
      throw new RateLimitUsageError(`${what} must be valid UTF-8`, '22021', limiter);
    }
  }
  checkName(limiter, 'limiter', limiter);
  checkName(key, 'key', limiter);
}

function checkCost(cost, limiter) {
  if (!Number.isInteger(cost) || cost > INT32_MAX) {
    throw new RateLimitUsageError('cost must be an integer from 0 to 2147483647', '22023', limiter);
  }
  if (cost < 0) throw new RateLimitUsageError(gcra.ERRORS.bad_cost, '22023', limiter);
}

// The limit of an explicit call, checked as rl_take checks it.
function checkLimit(limiter, rate, burst) {
  if (typeof rate !== 'number') throw new RateLimitUsageError(gcra.ERRORS.bad_rate, '22023', limiter);
  if (!Number.isInteger(burst) || burst > INT32_MAX) {
    throw new RateLimitUsageError('burst must be an integer from 1 to 2147483647', '22023', limiter);
  }
  const { limit, error } = gcra.limitInit(rate, burst, wallUs(), gcra.PG_MAX_TIME_US);
  if (error) throw new RateLimitUsageError(gcra.ERRORS[error], '22023', limiter);
  return limit;
}

// An interval (as text) in microseconds, counted as the server counts a
// policy's lockout: a month is 30 days (extract(epoch) counts a year as 365.25).
const intervalUs = (text) => '(SELECT ((extract(year FROM i) * 12 + extract(month FROM i)) * 30 + ' +
  'extract(day FROM i)) * 86400000000 + extract(hour FROM i) * 3600000000 + ' +
  `extract(minute FROM i) * 60000000 + extract(microseconds FROM i) FROM (VALUES (CAST(${text} AS interval))) AS v(i))::int8`;

// A row of rl_policies as the limiter keeps it; lockoutUs 0n: none.
function policyOf([limiter, rate, burst, shadow, lockoutUs, lockoutGrowth, lockoutMaxUs]) {
  return [limiter, {
    rate, burst, shadow, lockoutUs: lockoutUs === null ? 0n : BigInt(lockoutUs),
    lockoutGrowth: lockoutGrowth ?? 1, lockoutMaxUs: lockoutMaxUs === null ? 0n : BigInt(lockoutMaxUs),
  }];
}

// A decision of take: without takeAll's binding and limiter.
const singleDecision = ({ allowed, remaining, limit, retryAfter, resetAfter, retryAfterMs, resetAfterMs, reset, source }) => (
  { allowed, remaining, limit, retryAfter, resetAfter, retryAfterMs, resetAfterMs, reset, source });

class RateLimiter {
  // options: connectionString or connection (a pg client config), and the
  // DEFAULTS above; logger: an object with warn(fields, message) (pino's
  // order; by default the message goes to console.warn).
  constructor(options = {}) {
    const o = { ...DEFAULTS, ...options };
    for (const name of ['deadlineMs', 'backoffMs', 'poolSize', 'maxKeys', 'warningIntervalMs',
      'policyRefreshMs', 'cancelTimeoutMs', 'idleTimeoutMs']) {
      if (!Number.isInteger(o[name]) || o[name] < 1) throw new RangeError(`${name} must be an integer of at least 1`);
    }
    if (o.schema !== null && (typeof o.schema !== 'string' || o.schema === '')) {
      throw new RangeError('schema must be a non-empty string or null');
    }
    this.options = o;
    this.logger = o.logger ?? CONSOLE;
    const config = { ...(o.connection ?? {}) };
    if (o.connectionString !== undefined) config.connectionString = o.connectionString;
    config.fallback_application_name = 'ratelimit_client';
    this.pool = new Pool(config, o.poolSize, o.cancelTimeoutMs, o.idleTimeoutMs);
    const s = o.schema === null ? '' : quoteIdent(o.schema);
    // rl_take_all_detail (ratelimit 1.2) answers rl_take_all's columns and each
    // request's own decision: its reset_after, in the order of the requests,
    // lets an outage continue from every bucket's shared fill level.
    const all = (args) => 'SELECT a.allowed, a.remaining, a.retry_after, a.reset_after, a.limiter, ' +
      'ARRAY(SELECT r.reset_after FROM unnest(a.requests) WITH ORDINALITY AS r ORDER BY r.ordinality) ' +
      `FROM ${s}rl_take_all_detail(${args}) AS a`;
    this.queries = {
      take: `SELECT allowed, remaining, retry_after, reset_after FROM ${s}rl_take($1::text, $2::text, $3::float8, $4::int4, $5::int4)`,
      policy: `SELECT allowed, remaining, retry_after, reset_after FROM ${s}rl_take($1::text, $2::text, $3::int4)`,
      all: all('$1::text[], $2::text[], $3::float8[], $4::int4[], $5::int4[]'),
      allPolicy: all('$1::text[], $2::text[], $3::int4[]'),
      // to_jsonb leaves out the lockout columns of a database still at 1.2:
      // they read as no lockout
      policies: `SELECT p.limiter, p.rate, p.burst, p.shadow, ${intervalUs("j->>'lockout'")}, ` +
        `(j->>'lockout_growth')::float8, ${intervalUs("j->>'lockout_max'")} ` +
        `FROM ${s}rl_policies AS p CROSS JOIN LATERAL to_jsonb(p) AS j`,
      refund: `SELECT ${s}rl_refund($1::text, $2::text, $3::int4) AS refunded`,
    };
    this.salt = crypto.randomBytes(16);
    this.table = new KeyTable(o.maxKeys);
    this.retryDbAt = 0;	// performance.now() ms; 0: healthy
    this.failureReason = 'error';
    this.failure = '';
    this.policies = null;	// Map limiter -> policyOf's record, as last read
    this.policiesDue = 0;
    this.warned = new Map();	// limiter -> quiet until (ms), in that order
    this.summaryDue = 0;
    this.counters = { database: 0, local: 0, fallback: 0, fallbackTimeout: 0, fallbackError: 0,
      noRoom: 0, noPolicy: 0, policyReads: 0 };
  }

  // The explicit form when the options give a limit (rate and burst, or
  // limit and windowMs), else the policy form.
  take(limiter, key, { rate, burst, limit, windowMs, cost = 1 } = {}) {
    const item = { limiter, key, rate, burst, limit, windowMs, cost };
    return this.decide(hasLimit(item) ? 'take' : 'policy', [item]).then(singleDecision);
  }

  // 1 to 16 requests { limiter, key, rate, burst | limit, windowMs, cost },
  // all or nothing; all with a limit (explicit) or all without (their policies).
  takeAll(requests) {
    if (!Array.isArray(requests) || requests.length < 1 || requests.length > MAX_REQUESTS) {
      return Promise.reject(new RateLimitUsageError('requests must have 1 to 16 elements', '22023'));
    }
    const explicit = requests.filter((r) => r && hasLimit(r)).length;
    if (explicit !== 0 && explicit !== requests.length) {
      return Promise.reject(new RateLimitUsageError(
        'requests must all give rate and burst, or none (their policies)', '22023'));
    }
    return this.decide(explicit ? 'all' : 'allPolicy',
      requests.map((r) => ({ ...r, cost: r.cost ?? 1 })));
  }

  // Give cost back to the bucket, as rl_refund; true when it changed a live
  // bucket.  During an outage, the in-memory bucket only.
  async refund(limiter, key, cost = 1) {
    checkNames(limiter, key);
    checkCost(cost, limiter);
    const id = this.identity(limiter, key);
    const deadline = performance.now() + this.options.deadlineMs;
    const memory = () => {
      const e = this.table.find(id);
      const now = nowUs();
      if (e === null || !e.memory.present || e.memory.tatUs <= now) return false;
      const back = e.memory.tatUs - BigInt(cost) * e.memory.intervalUs;
      // a refund never ends a lockout
      this.table.set(e, 'memory', back > now ? back : now, e.memory.intervalUs, e.memory.lockUntilUs, e.memory.lockUs);
      return true;
    };
    if (this.backingOff(performance.now())) return memory();
    this.probing(performance.now());
    const r = await this.query(this.queries.refund, [limiter, key, cost], false, deadline);
    if (r.ok) {
      this.healthy();
      memory();
      return r.result.rows[0][0];
    }
    if (r.badUse) throw r.badUse(limiter);
    if (!r.busy) this.failed(r.reason, r.detail);
    return memory();
  }

  // limiter's policy as last read, or null: { rate, burst, shadow,
  // lockoutMs, lockoutGrowth, lockoutMaxMs } (lockoutMs null: no lockout;
  // lockoutMaxMs null: as lockoutMs).
  policy(limiter) {
    const p = this.policies && this.policies.get(limiter);
    if (!p) return null;
    const ms = (us) => (us === 0n ? null : Number(us) / 1000);
    return {
      rate: p.rate, burst: p.burst, shadow: p.shadow,
      lockoutMs: ms(p.lockoutUs), lockoutGrowth: p.lockoutGrowth, lockoutMaxMs: ms(p.lockoutMaxUs),
    };
  }

  stats() {
    return { ...this.counters, evictions: this.table.evictions, keys: this.table.count };
  }

  // Close the connections, within a deadline; the limiter's last use.
  end() {
    return this.pool.end(this.options.deadlineMs);
  }

  // The name of (limiter, key) in memory: the text itself, or for long text
  // a keyed hash, so that an entry stays small (no text holds a NUL, a hash
  // never does, so the two never meet).
  identity(limiter, key) {
    if (limiter.length + key.length <= 256) return `${limiter}\0${key}`;
    return crypto.createHash('sha256').update(this.salt).update(limiter).update('\0').update(key)
      .digest('base64');
  }

  // ---- the decision ----

  checkItems(call, items) {
    const byPolicy = call === 'policy' || call === 'allPolicy';
    items.forEach((it, i) => {
      try {
        if (it === null || typeof it !== 'object') throw new RateLimitUsageError('a request must be an object', '22023');
        checkNames(it.limiter, it.key);
        if (!byPolicy) {
          ({ rate: it.rate, burst: it.burst } = rateAndBurst(it, it.limiter));
          it.gcraLimit = checkLimit(it.limiter, it.rate, it.burst);
          it.known = true;
        }
        checkCost(it.cost, it.limiter);
      } catch (err) {
        if (items.length > 1) err.index = i;
        throw err;
      }
      it.id = this.identity(it.limiter, it.key);
      for (let j = 0; j < i; j++) {
        if (items[j].id === it.id) {
          throw new RateLimitUsageError('limiters and keys must not name the same pair twice', '22023', it.limiter, i);
        }
      }
    });
  }

  // The items' limits from the last read of rl_policies: a limiter not in
  // it is not known, and the database decides on it without a pre-check.
  applyPolicies(items) {
    const wall = wallUs();
    for (const it of items) {
      const p = this.policies && this.policies.get(it.limiter);
      let limit = p && gcra.limitInit(p.rate, p.burst, wall, gcra.PG_MAX_TIME_US).limit;
      if (limit && p.lockoutUs > 0n) {
        ({ limit } = gcra.lockoutInit(limit, p.lockoutUs, p.lockoutGrowth, p.lockoutMaxUs, wall, gcra.PG_MAX_TIME_US));
      }
      it.known = Boolean(limit);
      if (limit) Object.assign(it, { gcraLimit: limit, rate: p.rate, burst: p.burst, shadow: p.shadow });
    }
  }

  backingOff(now) {
    return this.retryDbAt !== 0 && now < this.retryDbAt;
  }

  // After a failure, this request is the one attempt of its interval.
  probing(now) {
    if (this.retryDbAt !== 0) this.retryDbAt = now + this.options.backoffMs;
  }

  healthy() {
    this.retryDbAt = 0;
  }

  failed(reason, detail) {
    this.retryDbAt = performance.now() + this.options.backoffMs;
    this.failureReason = reason;
    this.failure = detail;
  }

  // The decision of decideIn, with the limit (the binding request's burst;
  // null for a policy the last read of rl_policies did not have) and ms:
  // retryAfterMs, resetAfterMs, reset (the time the bucket is full again,
  // in epoch ms).
  async decide(call, items) {
    const d = await this.decideIn(call, items);
    const binding = items[d.binding ?? 0];
    d.limit = binding.known ? binding.burst : null;
    d.retryAfterMs = ceilMs(d.retryAfter);
    d.resetAfterMs = ceilMs(d.resetAfter);
    d.reset = Date.now() + d.resetAfterMs;
    return d;
  }

  async decideIn(call, items) {
    const byPolicy = call === 'policy' || call === 'allPolicy';
    this.checkItems(call, items);
    const deadline = performance.now() + this.options.deadlineMs;
    let readPolicies = false;
    if (byPolicy) {
      this.applyPolicies(items);
      // this call reads them; the others meanwhile use the last read
      if (performance.now() >= this.policiesDue) {
        readPolicies = true;
        this.policiesDue = performance.now() + this.options.policyRefreshMs;
      }
    }
    if (this.backingOff(performance.now())) {
      if (readPolicies) this.policiesDue = 0;
      return this.fallback(items, this.failureReason, this.failure);
    }
    // a due read goes to the database: the pre-check waits for its policy
    if (!readPolicies) {
      const refused = this.precheck(items);
      if (refused) {
        this.counters.local++;
        return refused;
      }
    }
    this.probing(performance.now());

    const values = this.values(call, items);
    const r = await this.query(this.queries[call], values, readPolicies, deadline);
    if (r.policies) {
      this.policies = new Map(r.policies.rows.map(policyOf));
      this.counters.policyReads++;
      this.applyPolicies(items);
    } else if (readPolicies) this.policiesDue = 0;
    if (r.ok) {
      const d = this.parse(call, items, r.result);
      if (d === null) {
        const detail = `${call.startsWith('all') ? 'rl_take_all_detail' : 'rl_take'} answered something that is not a decision`;
        this.failed('error', detail);
        return this.fallback(items, 'error', detail);
      }
      this.healthy();
      this.counters.database++;
      // each bucket's shared fill level, for an outage that starts now
      const now = nowUs();
      items.forEach((it, i) => {
        if (!it.known) {
          this.policiesDue = 0;	// a policy made since the last read
          return;
        }
        const e = this.table.get(it.id, now, true);
        if (e === null) return;
        const us = d.resets[i] * 1e6 >= Number(it.gcraLimit.toleranceUs)
          ? it.gcraLimit.toleranceUs : BigInt(Math.round(d.resets[i] * 1e6));
        const [lockUntilUs, lockUs] = this.lockLearned(items, it, i, d, e.memory, now);
        this.table.set(e, 'memory', now + us, it.gcraLimit.intervalUs, lockUntilUs, lockUs);
      });
      delete d.resets;
      return d;
    }
    if (r.badUse) {
      this.healthy();
      throw r.badUse(items[r.index ?? 0].limiter, items.length > 1 ? r.index ?? 0 : undefined);
    }
    // a full pool is load, not a failure of the database: no backoff
    if (!r.busy) this.failed(r.reason, r.detail);
    return this.fallback(items, r.reason, r.detail);
  }

  // The lock of item i (its lock_until and lock_us in memory) after the
  // database's answer d.  The answer has no lock_until or lock_us: under a
  // lockout, a denial of a request the burst holds is always a lock (one
  // that starts, or its remainder), so the key is locked for retry_after,
  // known for the request of the answer (a take, or the binding request of
  // a take_all when no other request shares its limiter).  A lock that
  // starts lasts retry_after; a lock already kept in memory is the same one
  // and keeps its length.  A key not locked: what memory holds while it has
  // ended (the length the next lockout grows from), none while memory
  // still had it locked (the database ended it: rl_reset).
  lockLearned(items, it, i, d, memory, now) {
    const sameLimiter = items.filter((other) => other.limiter === it.limiter).length;
    const answered = items.length === 1 || (i === d.binding && sameLimiter === 1);
    const running = memory.present && now < memory.lockUntilUs;
    if (!d.allowed && !answered) return [memory.lockUntilUs, memory.lockUs];
    if (it.shadow) return [memory.lockUntilUs, memory.lockUs];
    if (!d.allowed && it.gcraLimit.lockoutUs > 0n && it.cost > 0 && it.cost <= it.burst && d.retryAfter !== Infinity) {
      const remainder = BigInt(Math.round(d.retryAfter * 1e6));
      return [now + remainder, running ? memory.lockUs : remainder];
    }
    return running ? [0n, 0n] : [memory.lockUntilUs, memory.lockUs];
  }

  values(call, items) {
    if (call === 'take') {
      const [it] = items;
      return [it.limiter, it.key, it.rate, it.burst, it.cost];
    }
    if (call === 'policy') return [items[0].limiter, items[0].key, items[0].cost];
    const limiters = items.map((it) => it.limiter);
    const keys = items.map((it) => it.key);
    const costs = items.map((it) => it.cost);
    return call === 'all'
      ? [limiters, keys, items.map((it) => it.rate), items.map((it) => it.burst), costs]
      : [limiters, keys, costs];
  }

  // The database's row as a decision with each bucket's reset_after; null
  // when it is not one.
  parse(call, items, result) {
    const row = result.rows.length === 1 ? result.rows[0] : null;
    if (row === null || typeof row[0] !== 'boolean' || !Number.isInteger(row[1]) || typeof row[3] !== 'number') return null;
    const d = {
      allowed: row[0], remaining: row[1], retryAfter: row[2] === null ? Infinity : row[2],
      resetAfter: row[3], source: 'database', resets: [row[3]],
    };
    if (call === 'take' || call === 'policy') return d;
    d.binding = items.findIndex((it) => it.limiter === row[4]);
    d.limiter = row[4];
    d.resets = row[5];
    if (d.binding < 0 || !Array.isArray(d.resets) || d.resets.length !== items.length) return null;
    return d;
  }

  // One database call within the deadline: { ok, result, policies } or
  // { reason, detail, busy } or { badUse(limiter, index), index }.
  async query(text, values, readPolicies, deadline) {
    const ms = this.options.deadlineMs;
    for (let secondTry = false; ; secondTry = true) {
      const slot = await this.pool.acquire(deadline);
      if (slot === null) {
        return { reason: 'timeout', busy: true, detail: `no free connection within ${ms} ms (poolSize ${this.options.poolSize})` };
      }
      const reused = slot.client !== null;
      let inFlight = false;
      let policies = null;
      try {
        if (!reused) await this.pool.connect(slot, deadline);
        inFlight = true;
        if (readPolicies) {
          policies = await within(slot.client.query({ text: this.queries.policies, rowMode: 'array' }), deadline);
        }
        const result = await within(slot.client.query({ text, values, rowMode: 'array' }), deadline);
        inFlight = false;
        this.pool.release(slot, !slot.client.rlBroken, false, false);
        return { ok: true, result, policies };
      } catch (err) {
        const timeout = err instanceof Timeout;
        const client = slot.client;
        // a pooled connection the server closed, e.g. by a restart
        const dead = reused && !timeout && client !== null && Boolean(client.rlBroken);
        const keep = !timeout && client !== null && !client.rlBroken;
        this.pool.release(slot, keep, timeout && inFlight, dead);
        if (dead && !secondTry) continue;	// the server may be back: a new session, once
        if (!timeout && isBadUse(err.code)) {
          const element = /element (\d+)/.exec(err.where ?? '');
          const index = element ? Number(element[1]) - 1 : 0;
          const message = err.message;
          return {
            index: index >= 0 && index < 16 ? index : 0,
            badUse: (limiter, i) => new RateLimitUsageError(message, err.code, limiter, i, err),
            policies,
          };
        }
        if (timeout) {
          return { reason: 'timeout', detail: err.message === 'connect' ? `could not connect within ${ms} ms` : `no answer within ${ms} ms`, policies };
        }
        const detail = (err.code ? `${err.message} (SQLSTATE ${err.code})` : err.message || String(err)).split('\n')[0];
        return { reason: 'error', detail: detail || 'the connection failed', policies };
      }
    }
  }

  // ---- in memory ----

  // The pre-check, all or nothing over the buckets of twice the burst: a
  // refusal (source 'local') with the database's last answers carried
  // forward, or null.  Not pre-checked: cost > burst, a shadow policy (it
  // never denies), a limiter whose policy is not known.
  precheck(items) {
    const now = nowUs();
    const wall = wallUs();
    const known = items.filter((it) => it.known);
    // the database's last answers, neither stored
    const last = (spend) => gcra.decideAll(known.map((it) => {
      const e = this.table.find(it.id);
      return { limit: it.gcraLimit, bucket: e ? { ...e.memory } : { present: false }, cost: spend ? it.cost : 0, shadow: it.shadow };
    }), now);
    const locked = this.lockedAnswer(items, known, last, now);
    if (locked) return locked;
    const requests = [];
    const entries = [];
    const which = [];
    items.forEach((it, i) => {
      if (!it.known || it.shadow || it.cost > it.burst) return;
      const { limit } = gcra.limitInit(it.rate, Math.min(INT32_MAX, 2 * it.burst), wall, gcra.PG_MAX_TIME_US);
      if (!limit) return;
      const e = this.table.get(it.id, now, false);
      if (e === null) return;	// no room: the database decides, unchecked
      this.table.pin(e, true);
      requests.push({ limit, bucket: { ...e.precheck }, cost: it.cost, shadow: false });
      entries.push(e);
      which.push(i);
    });
    if (requests.length === 0) return null;
    const pre = gcra.decideAll(requests, now);
    entries.forEach((e, i) => {
      const d = pre.decisions[i];
      if (d.store) this.table.set(e, 'precheck', d.newTatUs, requests[i].limit.intervalUs, d.newLockUntilUs, d.newLockUs);
      this.table.pin(e, false);
    });
    if (pre.combined.allowed) return null;

    const peek = last(false).combined;
    const take = last(true).combined;
    const preRetry = pre.combined.retryAfterUs;
    let retry;
    if (take.allowed || (take.retryKnown && take.retryAfterUs < preRetry)) retry = seconds(preRetry);
    else retry = take.retryKnown ? seconds(take.retryAfterUs) : Infinity;
    return this.answer(items, {
      allowed: false, remaining: peek.remaining, retryAfter: retry, resetAfter: seconds(peek.resetAfterUs),
      binding: which[pre.combined.binding],
    }, 'local');
  }

  // A refusal (source 'local') when the database locked a key of the call
  // and the lock has not ended: the call decided on the database's last
  // answers, whose retryAfter is the lock's remainder; else null.
  lockedAnswer(items, known, last, now) {
    const isLocked = (it) => {
      const e = this.table.find(it.id);
      return it.cost > 0 && !it.shadow && it.gcraLimit.lockoutUs > 0n && e !== null &&
        e.memory.present && now < e.memory.lockUntilUs;
    };
    if (!known.some(isLocked)) return null;
    const { combined } = last(true);
    return this.answer(items, {
      allowed: false, remaining: combined.remaining,
      retryAfter: combined.retryKnown ? seconds(combined.retryAfterUs) : Infinity,
      resetAfter: seconds(combined.resetAfterUs), binding: items.indexOf(known[combined.binding]),
    }, 'local');
  }

  // The in-memory limiter during an outage, all or nothing by the last
  // known limits.  Refused, never allowed: a limiter whose policy was never
  // read, a key without a bucket when memory is full of live ones.
  fallback(items, reason, detail) {
    const now = nowUs();
    let d;
    const unknown = items.findIndex((it) => !it.known);
    if (unknown >= 0) {
      const wait = this.retryDbAt === 0 ? 0 : Math.max(0, this.retryDbAt - performance.now()) / 1000;
      d = { allowed: false, remaining: 0, retryAfter: wait, resetAfter: wait, binding: unknown };
      this.counters.noPolicy++;
    } else {
      // pinned, so that making room for one request never forgets another's
      const pin = items.length > 1;
      const entries = [];
      for (const it of items) {
        const e = this.table.get(it.id, now, false);
        if (e === null) break;
        if (pin) this.table.pin(e, true);
        entries.push(e);
      }
      if (entries.length === items.length) {
        const requests = items.map((it, i) => ({ limit: it.gcraLimit, bucket: { ...entries[i].memory }, cost: it.cost, shadow: it.shadow }));
        const { combined, decisions } = gcra.decideAll(requests, now);
        decisions.forEach((dd, i) => {
          if (dd.store) {
            this.table.set(entries[i], 'memory', dd.newTatUs, requests[i].limit.intervalUs, dd.newLockUntilUs, dd.newLockUs);
          }
        });
        d = {
          allowed: combined.allowed, remaining: combined.remaining,
          retryAfter: combined.retryKnown ? seconds(combined.retryAfterUs) : Infinity,
          resetAfter: seconds(combined.resetAfterUs), binding: combined.binding,
        };
      }
      if (pin) for (const e of entries) this.table.pin(e, false);
      if (d === undefined) {
        const it = items[entries.length];
        const roomAfter = seconds(this.table.firstFullAt() - now);
        d = {
          allowed: false, remaining: 0, retryAfter: it.cost > it.burst ? Infinity : roomAfter,
          resetAfter: roomAfter, binding: entries.length,
        };
        this.counters.noRoom++;
      }
    }
    this.counters.fallback++;
    if (reason === 'timeout') this.counters.fallbackTimeout++;
    else this.counters.fallbackError++;
    this.warn(items, reason, detail);
    return this.answer(items, d, 'fallback');
  }

  answer(items, d, source) {
    d.source = source;
    d.limiter = items[d.binding].limiter;
    return d;
  }

  // At most one warning per limiter per interval; past MAX_WARNED_LIMITERS
  // within one, the others share one summary line per interval.
  warn(items, reason, detail) {
    const now = performance.now();
    const o = this.options;
    const why = () => `the database failed (${reason}: ${detail}); it is tried again at most every ${o.backoffMs} ms`;
    const fields = { reason, detail, backoffMs: o.backoffMs };
    const limiters = items.length === 1 ? [items[0].limiter] : new Set(items.map((it) => it.limiter));
    for (const limiter of limiters) {
      const due = this.warned.get(limiter);
      if (due !== undefined && due > now) continue;
      this.warned.delete(limiter);
      if (this.warned.size >= MAX_WARNED_LIMITERS) {
        // the first is the one quiet the shortest: its interval may be over
        const [first, firstDue] = this.warned.entries().next().value;
        if (firstDue > now) {
          if (now < this.summaryDue) continue;
          this.summaryDue = now + o.warningIntervalMs;
          this.logger.warn({ ...fields, namedLimiters: MAX_WARNED_LIMITERS },
            `ratelimit: more than ${MAX_WARNED_LIMITERS} limiters are decided in memory at the same limit: ${why()}; ` +
            `only ${MAX_WARNED_LIMITERS} are named, each at most once per ${o.warningIntervalMs} ms, and this line comes at most once per ${o.warningIntervalMs} ms`);
          continue;
        }
        this.warned.delete(first);
      }
      this.warned.set(limiter, now + o.warningIntervalMs);
      this.logger.warn({ ...fields, limiter }, `ratelimit: limiter "${limiter}" is decided in memory at the same limit: ${why()}`);
    }
  }
}

module.exports = { RateLimiter, DEFAULTS };
