// A real OpenID provider (panva/oidc-provider, certified) for gpupool's sign-in tests and the
// demo. It signs ID tokens with an RSA key made at start-up, serves discovery and JWKS, demands
// PKCE, and offers RP-initiated logout. Users live in a JSON file read on every sign-in, so a
// test can change someone's groups (or remove them) between two sign-ins. Refresh tokens are
// issued when the client asks for offline_access; a user removed from the file, or marked
// "disabled": true, is refused at the next refresh (invalid_grant), as a real IdP does.
//
//   node server.mjs CONFIG.json
//
// CONFIG: {"issuer": "http://127.0.0.1:PORT", "port": PORT, "users_file": "users.json",
//          "clients": [{client_id, client_secret, redirect_uris, post_logout_redirect_uris}],
//          "id_token_ttl": 3600}
// users.json: {"alice": {"password": "...", "email": "...", "name": "...", "groups": [...],
//                       "disabled": false}}
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import querystring from 'node:querystring';

import Provider from 'oidc-provider';

const config = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));

function users() {
  return JSON.parse(fs.readFileSync(config.users_file, 'utf8'));
}

function escape(text) {
  return String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

const { privateKey } = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
const signingKey = { ...privateKey.export({ format: 'jwk' }), kid: crypto.randomUUID(), use: 'sig', alg: 'RS256' };

const provider = new Provider(config.issuer, {
  clients: config.clients.map((c) => ({ grant_types: ['authorization_code', 'refresh_token'], response_types: ['code'], ...c })),
  jwks: { keys: [signingKey] },
  cookies: { keys: [crypto.randomBytes(32).toString('hex')] },
  pkce: { required: () => true },
  scopes: ['openid', 'offline_access', 'email', 'profile', 'groups'],
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    profile: ['name', 'preferred_username'],
    groups: ['groups'],
  },
  // The portal reads the claims from the ID token itself.
  conformIdTokenClaims: false,
  ttl: { IdToken: config.id_token_ttl || 3600, AccessToken: 600, Session: 3600, Grant: 3600, Interaction: 600 },
  features: { devInteractions: { enabled: false }, rpInitiatedLogout: { enabled: true } },
  interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
  async findAccount(ctx, sub) {
    const user = users()[sub];
    if (!user || user.disabled) return undefined;
    return {
      accountId: sub,
      async claims() {
        return {
          sub,
          email: user.email,
          email_verified: true,
          name: user.name,
          preferred_username: sub,
          groups: user.groups || [],
        };
      },
    };
  },
});

function loginPage(uid, message) {
  return `<!doctype html><html><head><title>Test IdP sign-in</title></head><body>
<h1>Test identity provider</h1>${message ? `<p role="alert">${escape(message)}</p>` : ''}
<form method="post" action="/interaction/${escape(uid)}/login">
<label for="login">Username</label><input id="login" name="login" autocomplete="username">
<label for="password">Password</label><input id="password" name="password" type="password">
<button type="submit">Sign in at the provider</button></form></body></html>`;
}

async function readForm(req) {
  let body = '';
  for await (const chunk of req) body += chunk;
  return querystring.parse(body);
}

async function consent(req, res, details) {
  // A first-party portal: consent is given on the user's behalf, as an organisation's IdP does.
  const { prompt, params, session, grantId } = details;
  const grant = grantId
    ? await provider.Grant.find(grantId)
    : new provider.Grant({ accountId: session.accountId, clientId: params.client_id });
  if (prompt.details.missingOIDCScope) grant.addOIDCScope(prompt.details.missingOIDCScope.join(' '));
  if (prompt.details.missingOIDCClaims) grant.addOIDCClaims(prompt.details.missingOIDCClaims);
  for (const [indicator, scopes] of Object.entries(prompt.details.missingResourceScopes || {})) {
    grant.addResourceScope(indicator, scopes.join(' '));
  }
  const saved = await grant.save();
  await provider.interactionFinished(req, res, { consent: { grantId: saved } }, { mergeWithLastSubmission: true });
}

async function interaction(req, res) {
  const match = req.url.match(/^\/interaction\/([^/?]+)(\/login)?/);
  const details = await provider.interactionDetails(req, res);
  if (details.uid !== match[1]) throw new Error('interaction mismatch');
  if (details.prompt.name === 'consent') return consent(req, res, details);
  if (req.method === 'POST' && match[2]) {
    const form = await readForm(req);
    const user = users()[form.login];
    if (!user || user.disabled || !user.password || user.password !== form.password) {
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
      return res.end(loginPage(details.uid, 'Wrong username or password.'));
    }
    return provider.interactionFinished(req, res, { login: { accountId: form.login } }, { mergeWithLastSubmission: false });
  }
  res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
  return res.end(loginPage(details.uid));
}

const callback = provider.callback();
const server = http.createServer((req, res) => {
  if (req.url.startsWith('/interaction/')) {
    interaction(req, res).catch((err) => {
      res.writeHead(400, { 'content-type': 'text/plain' });
      res.end(`interaction failed: ${err.message}`);
    });
    return;
  }
  callback(req, res);
});
server.listen(config.port, '127.0.0.1', () => {
  process.stdout.write(`listening ${config.issuer}\n`);
});
