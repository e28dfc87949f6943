// Types of ratelimit-client: decisions of the ratelimit PostgreSQL extension
// with a local pre-check, a deadline and a per-process fallback.

/** Who made a decision. */
export type Source = 'database' | 'local' | 'fallback';

export interface Decision {
  allowed: boolean;
  /** requests of cost 1 left in the burst */
  remaining: number;
  /** the burst (the limit per window) of the binding limit; null: a policy the client has not read */
  limit: number | null;
  /** seconds; 0 when allowed; Infinity when never (cost > burst: rl_take's NULL) */
  retryAfter: number;
  /** seconds until the bucket is full again */
  resetAfter: number;
  /** retryAfter in whole ms, rounded up; Infinity when never */
  retryAfterMs: number;
  /** resetAfter in whole ms, rounded up */
  resetAfterMs: number;
  /** when the bucket is full again: epoch ms, as Date.now() */
  reset: number;
  source: Source;
}

/** The one answer of a multi-limit call, as rl_decision_all. */
export interface DecisionAll extends Decision {
  /** the index of the binding request */
  binding: number;
  /** its limiter, as rl_take_all's limiter */
  limiter: string;
}

export interface Limit {
  rate: number;
  burst: number;
}

/** a row of rl_policies, as last read */
export interface Policy extends Limit {
  shadow: boolean;
  /** the first lockout's length in ms; null: no lockout */
  lockoutMs: number | null;
  /** each repeat offence's factor (1: the same length) */
  lockoutGrowth: number;
  /** the longest lockout in ms; null: as lockoutMs */
  lockoutMaxMs: number | null;
}

/** A unit of a duration: ms, s, m, h, d, or their words (second, minutes, ...). */
export type DurationUnit =
  | 'ms' | 'msec' | 'millisecond' | 'milliseconds'
  | 's' | 'sec' | 'secs' | 'second' | 'seconds'
  | 'm' | 'min' | 'mins' | 'minute' | 'minutes'
  | 'h' | 'hr' | 'hrs' | 'hour' | 'hours'
  | 'd' | 'day' | 'days';
/** A duration such as '1 m', '15 minutes' or '500ms'. */
export type Duration = `${number} ${DurationUnit}` | `${number}${DurationUnit}`;

export interface TakeOptions {
  /** limit requests per windowMs (the burst is limit); with windowMs, in place of rate and burst */
  limit?: number;
  /** the window: ms, or a duration such as '1 m' */
  windowMs?: number | Duration;
  /** requests per second; with burst (rl_take's arguments). Without a limit: the policy */
  rate?: number;
  burst?: number;
  /** default 1; 0 peeks */
  cost?: number;
}

export interface Request extends TakeOptions {
  limiter: string;
  key: string;
}

/** What a warning says, as fields: the limiter (or, on the summary line, how many are named) and why. */
export interface WarningFields {
  limiter?: string;
  /** 'timeout' or 'error' */
  reason: string;
  detail: string;
  backoffMs: number;
  namedLimiters?: number;
}

/** Anything with warn(fields, message), in pino's order: a pino logger, or console. */
export interface Logger {
  warn(fields: WarningFields, message: string): unknown;
}

/** The subset of a pg client configuration the limiter passes on. */
export interface ConnectionConfig {
  host?: string;
  port?: number;
  database?: string;
  user?: string;
  password?: string | (() => string | Promise<string>);
  ssl?: boolean | object;
  application_name?: string;
  [option: string]: unknown;
}

export interface RateLimiterOptions {
  connectionString?: string;
  connection?: ConnectionConfig;
  /** schema of rl_take; null: the connection's search_path (default) */
  schema?: string | null;
  /** per decision, waiting for a connection and connecting included: 250 */
  deadlineMs?: number;
  /** after a failure, at most one database attempt per interval: 1000 */
  backoffMs?: number;
  /** connections, at most: 4 */
  poolSize?: number;
  /** keys in memory, at most: 100000 */
  maxKeys?: number;
  /** at most one warning per limiter per interval: 60000 */
  warningIntervalMs?: number;
  /** rl_policies is read again after: 10000 */
  policyRefreshMs?: number;
  /** how long a cancel request may wait for the server: 10000 */
  cancelTimeoutMs?: number;
  /** an idle connection is closed after: 10000 */
  idleTimeoutMs?: number;
  /** the message to console.warn by default */
  logger?: Logger;
}

export interface Stats {
  database: number;
  local: number;
  fallback: number;
  fallbackTimeout: number;
  fallbackError: number;
  noRoom: number;
  noPolicy: number;
  policyReads: number;
  evictions: number;
  keys: number;
}

export const DEFAULTS: Readonly<Required<Omit<RateLimiterOptions, 'connectionString' | 'connection' | 'logger'>>>;

/** Bad use: an argument the server refuses, or an error a retry cannot fix. */
export class RateLimitUsageError extends Error {
  /** the server's SQLSTATE: 22xxx, 42501 or 42704 */
  code: string;
  limiter: string | undefined;
  /** in a multi-limit call, the request at fault */
  index?: number;
  /** pg's DatabaseError when the server refused; undefined when the client's own check did */
  cause?: unknown;
}

/** @deprecated the name of 1.2: RateLimitUsageError, the same class */
export const RateLimitError: typeof RateLimitUsageError;
/** @deprecated the name of 1.2: RateLimitUsageError */
export type RateLimitError = RateLimitUsageError;

export class RateLimiter {
  constructor(options?: RateLimiterOptions);
  take(limiter: string, key: string, options?: TakeOptions): Promise<Decision>;
  takeAll(requests: Request[]): Promise<DecisionAll>;
  refund(limiter: string, key: string, cost?: number): Promise<boolean>;
  policy(limiter: string): Policy | null;
  stats(): Stats;
  end(): Promise<void>;
}

/** A list of trusted ranges ("10.0.0.0/8", "::1") or one comma-separated string. */
export type Trusted = readonly string[] | string | null;

export function clientIp(remote: string | null | undefined, xForwardedFor: string | null | undefined, trusted: Trusted): string | null;
export function clientIpForwarded(remote: string | null | undefined, forwarded: string | null | undefined, trusted: Trusted): string | null;
export function ipKey(ip: string, ipv6Prefix?: number): string;

export interface RateLimitFields {
  'RateLimit-Policy': string;
  RateLimit: string;
  'Retry-After'?: string;
}
export function rateLimitHeaders(decision: Decision, limiter: string, rate: number, burst: number): RateLimitFields;

/** The parts of Express's request and response the middleware uses. */
export interface HttpRequest {
  headers: Record<string, string | string[] | undefined>;
  socket: { remoteAddress?: string };
  rateLimit?: Decision | DecisionAll;
}
export interface HttpResponse {
  headersSent: boolean;
  set(field: string | Record<string, string>, value?: string): unknown;
  append(field: string, value: string): unknown;
  status(code: number): HttpResponse;
  type(type: string): HttpResponse;
  send(body: string): unknown;
  json(body: unknown): unknown;
}

export interface LimitRequest extends TakeOptions {
  limiter: string;
  /** default: rl_ip_key of the client address */
  key?: string;
}

/** A denial's body: text (text/plain) or anything else (JSON). */
export type DenialMessage<Req, Res> = unknown | ((req: Req, res: Res) => unknown | Promise<unknown>);

export interface RateLimitOptions<Req extends HttpRequest = HttpRequest, Res extends HttpResponse = HttpResponse> extends TakeOptions {
  /** one limit: its limiter (with rate and burst, or its policy) */
  limiter?: string;
  /** several limits, all or nothing; ip is rl_ip_key of the client address */
  limits?: LimitRequest[] | ((req: Req, ip: string | null) => LimitRequest[]);
  /** proxies whose header is believed; none by default */
  trustedProxies?: Trusted;
  /** 'x-forwarded-for' (default) or 'forwarded' (RFC 7239) */
  header?: 'x-forwarded-for' | 'forwarded';
  /** IPv6 clients share a budget per prefix: 64 */
  ipv6Prefix?: number;
  /** true: the request goes on undecided, without fields (a health check) */
  skip?: (req: Req, res: Res) => boolean | Promise<boolean>;
  /** a denial's status: 429 */
  statusCode?: number;
  /** a denial's body: 'Too many requests\n' */
  message?: DenialMessage<Req, Res>;
  /** answers a denial in place of statusCode and message; options: these, with their defaults */
  handler?: (req: Req, res: Res, next: (err?: unknown) => void, options: RateLimitOptions<Req, Res>) => unknown;
  /** the request's property that holds the decision: 'rateLimit' */
  requestPropertyName?: string;
}

export function rateLimit<Req extends HttpRequest = HttpRequest, Res extends HttpResponse = HttpResponse>(
  limiter: RateLimiter, options: RateLimitOptions<Req, Res>,
): (req: Req, res: Res, next: (err?: unknown) => void) => Promise<void>;
