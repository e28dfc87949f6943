'use strict';
// Connections of one limiter: at most size pg clients, each used by one
// decision at a time, every wait bounded by the decision's deadline.  A
// connection whose query outlived its deadline is never waited for: it
// leaves the pool at once, and a cancel request is sent for its query
// before it is closed (in that order: PgBouncer forgets a client's cancel
// key when the client goes).  A cancel request that is lost (a stalled
// server, a proxy that swallows it) costs one socket for cancelMs, never a
// pool slot.  An idle connection holds the process up for nothing: its
// socket is unref'd (a script that never calls end() exits), and it is
// closed after idleMs.

const net = require('node:net');
const pg = require('pg');

const CANCEL_REQUEST_CODE = 80877102;
// cancel requests in progress in this process, at most; past that, close at once
const MAX_CANCELS = 64;
let cancelsRunning = 0;

class Timeout extends Error {}

// The promise, or a Timeout once deadline (performance.now() ms) passes; a
// late outcome of the promise is dropped.
function within(promise, deadline, what) {
  const left = deadline - performance.now();
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Timeout(what)), Math.max(0, Math.ceil(left)));
    promise.then((v) => { clearTimeout(timer); resolve(v); },
      (e) => { clearTimeout(timer); reject(e); });
  });
}

function destroy(client) {
  const stream = client.connection && client.connection.stream;
  if (stream) stream.destroy();
}

// Ask the server to cancel client's query, then close client.
function cancelAndClose(client, cancelMs) {
  if (!client.processID || cancelsRunning >= MAX_CANCELS) {
    destroy(client);
    return;
  }
  cancelsRunning++;
  const host = client.host || 'localhost';
  const socket = host.startsWith('/')
    ? net.connect({ path: `${host}/.s.PGSQL.${client.port}` })
    : net.connect({ host, port: client.port });
  let done = false;
  const finish = () => {
    if (done) return;
    done = true;
    cancelsRunning--;
    socket.destroy();
    destroy(client);
  };
  socket.unref();
  socket.setTimeout(cancelMs, finish);
  socket.on('error', finish);
  socket.on('close', finish);
  socket.on('connect', () => {
    const packet = Buffer.alloc(16);
    packet.writeInt32BE(16, 0);
    packet.writeInt32BE(CANCEL_REQUEST_CODE, 4);
    packet.writeInt32BE(client.processID, 8);
    packet.writeInt32BE(client.secretKey, 12);
    socket.write(packet);
  });
}

// An idle connection: unref'd, so that the process may exit while it
// waits, and closed (close) after idleMs.
function park(client, idleMs, close) {
  const stream = client.connection && client.connection.stream;
  if (stream) stream.unref();
  client.rlIdleTimer = setTimeout(close, idleMs);
  client.rlIdleTimer.unref();
}

// The connection in use again: it holds the process up, no idle timer.
function unpark(client) {
  clearTimeout(client.rlIdleTimer);
  const stream = client.connection && client.connection.stream;
  if (stream) stream.ref();
}

function drop(client) {
  clearTimeout(client.rlIdleTimer);
  destroy(client);
}

// Close an idle connection as a client that says goodbye (Terminate); its
// socket is destroyed when the server has seen it go, or after waitMs (a
// frozen server never answers).
function closeIdle(client, waitMs) {
  const timer = setTimeout(() => destroy(client), waitMs);
  timer.unref();
  client.end().catch(() => {}).finally(() => {
    clearTimeout(timer);
    destroy(client);
  });
}

class Pool {
  constructor(config, size, cancelMs, idleMs) {
    this.config = config;
    this.size = size;
    this.cancelMs = cancelMs;
    this.idleMs = idleMs;
    this.idle = [];
    this.busy = 0;
    this.waiters = [];
    this.ended = false;
  }

  // A slot { client } (client null: connect it) within the deadline, or null.
  acquire(deadline) {
    // one the server closed while idle (a restart) is dropped, not used
    for (const c of this.idle.filter((c) => c.rlBroken)) drop(c);
    this.idle = this.idle.filter((c) => !c.rlBroken);
    if (this.idle.length > 0) {
      this.busy++;
      const client = this.idle.pop();
      unpark(client);
      return Promise.resolve({ client });
    }
    if (this.busy < this.size) {
      this.busy++;
      return Promise.resolve({ client: null });
    }
    return new Promise((resolve) => {
      const waiter = { resolve, timer: null };
      waiter.timer = setTimeout(() => {
        this.waiters.splice(this.waiters.indexOf(waiter), 1);
        resolve(null);
      }, Math.max(0, Math.ceil(deadline - performance.now())));
      this.waiters.push(waiter);
    });
  }

  async connect(slot, deadline) {
    const client = new pg.Client(this.config);
    slot.client = client;
    client.on('error', () => { client.rlBroken = true; });
    client.on('end', () => { client.rlBroken = true; });
    try {
      await within(client.connect(), deadline, 'connect');
    } catch (err) {
      destroy(client);
      slot.client = null;
      throw err;
    }
  }

  // Give a slot back: its client kept idle, or (keep false) closed, its
  // query cancelled when one may still run.  A broken connection takes the
  // idle ones with it: they lead to the same server, and after a restart a
  // stale one would fail the next attempt.
  release(slot, keep, inFlight, broken) {
    const client = slot.client;
    slot.client = null;
    if (client !== null && (!keep || this.ended)) {
      if (inFlight) cancelAndClose(client, this.cancelMs);
      else destroy(client);
    }
    if (broken) for (const c of this.idle.splice(0)) drop(c);
    const kept = keep && !this.ended ? client : null;
    const waiter = this.waiters.shift();
    if (waiter !== undefined) {
      clearTimeout(waiter.timer);
      waiter.resolve({ client: kept });
      return;
    }
    this.busy--;
    if (kept === null) return;
    this.idle.push(kept);
    park(kept, this.idleMs, () => {
      this.idle.splice(this.idle.indexOf(kept), 1);
      closeIdle(kept, this.cancelMs);
    });
  }

  // Close the idle connections, waiting at most waitMs for the server to
  // see them go (a frozen server never answers); a busy one closes when its
  // decision ends.
  async end(waitMs) {
    this.ended = true;
    const idle = this.idle.splice(0);
    let timer;
    idle.forEach(unpark);
    await Promise.race([
      Promise.all(idle.map((c) => c.end().catch(() => {}))),
      new Promise((resolve) => { timer = setTimeout(resolve, waitMs); }),
    ]);
    clearTimeout(timer);
    idle.forEach(drop);
  }
}

module.exports = { Pool, Timeout, within };
