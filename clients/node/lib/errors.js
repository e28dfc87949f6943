'use strict';
// The error of bad use: an argument the server refuses, or an error a retry
// cannot fix.  Its own module, so that every part of the client can throw it
// without requiring the client.

class RateLimitError extends Error {
  constructor(message, code, limiter, index) {
    super(message);
    this.name = 'RateLimitError';
    this.code = code;	// the server's SQLSTATE
    this.limiter = limiter;
    if (index !== undefined) this.index = index;
  }
}

module.exports = { RateLimitError };
