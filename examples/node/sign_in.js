// sign_in.js: npm install express@5 pg; DATABASE_URL=postgres://web:change-me@localhost/app node sign_in.js
const express = require('express');
const { Pool } = require('pg');

const pool = new Pool({ connectionString: process.env.DATABASE_URL, connectionTimeoutMillis: 2000 });
// a server restart closes idle connections: log it rather than crash
pool.on('error', (err) => console.error('idle database connection:', err.message));

// 5 sign-in attempts per minute per client address, burst 5
async function signInLimit(req, res, next) {
  let d;
  try {
    ({ rows: [d] } = await pool.query(
      `SELECT allowed, retry_after
         FROM rl_take('auth_login', rl_ip_key(rl_client_ip($1::inet, $2)), 5.0/60, 5)`,
      [req.socket.remoteAddress, req.headers['x-forwarded-for'] ?? null]));
  } catch (err) {
    console.error('rate limit:', err.message);   // fail closed: no decision, no sign-in
    return res.status(503).set('Retry-After', '5').send('Try again later\n');
  }
  if (!d.allowed) {
    res.set('Retry-After', String(Math.ceil(d.retry_after)));
    return res.status(429).send('Too many attempts\n');
  }
  next();
}

const app = express();
app.post('/login', signInLimit, (req, res) => {
  // ... check the password
  res.send('checked\n');
});
app.listen(Number(process.env.PORT ?? 3000), '127.0.0.1');
