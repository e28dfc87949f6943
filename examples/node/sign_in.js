// sign_in.js, in the application's folder: npm install --install-links express@5 /path/to/ratelimit/clients/node
// DATABASE_URL=postgres://web:change-me@localhost/app node sign_in.js
const express = require('express');
const { RateLimiter, rateLimit } = require('ratelimit-client');

const limiter = new RateLimiter({ connectionString: process.env.DATABASE_URL });
const app = express();
app.use(express.urlencoded({ extended: false }));

// the three policies, all or nothing: 429 when any refuses
const signInLimit = rateLimit(limiter, {
  trustedProxies: ['127.0.0.1'],   // nginx: the address it saw is the client's
  limits: (req, ip) => {
    req.lockoutKey = `${req.body.email} ${ip}`;   // a stranger cannot lock the owner out
    return [{ limiter: 'sign_in_ip', key: ip },
            { limiter: 'sign_in_failures', key: req.body.email },
            { limiter: 'sign_in_lockout', key: req.lockoutKey }];
  },
});

app.post('/login', (req, res, next) => {
  if (!req.body?.email) return res.status(400).send('An e-mail address, please\n');
  next();
}, signInLimit, async (req, res) => {
  if (req.body.password !== 'right') {   // ... check the password
    return res.status(401).send('Wrong e-mail address or password\n');
  }
  await limiter.refund('sign_in_failures', req.body.email);   // signed in: only failures count
  await limiter.refund('sign_in_lockout', req.lockoutKey);
  res.send('Signed in\n');
});
// the client's errors (a bad use, a revoked privilege; never an outage) are
// logged, and the user gets a plain 500, without the stack or the server's paths
app.use((err, req, res, next) => {
  console.error(err);
  res.status(500).send('Internal error\n');
});
app.listen(Number(process.env.PORT ?? 3000), '127.0.0.1');
