// A remote MCP server behind OAuth whose authorization server is
// `oidc-provider` (npm, a certified OpenID Provider and OAuth 2.0
// authorization server), for the end-to-end test of hintgate as a service
// account and on a machine without a browser: the client credentials grant,
// the device authorization grant (RFC 8628) with oidc-provider's own device
// pages and its development sign-in and consent pages (a test plays the
// person there), refresh with rotation, resource indicators (RFC 8707),
// revocation (RFC 7009) and the metadata are oidc-provider's code. This
// file adds the resource server: a minimal MCP endpoint (JSON answers, no
// session) that takes only access tokens oidc-provider issued for it, found
// in oidc-provider's own token store, with the scope the call needs:
// `read_notes` needs `notes:read`, `write_note` needs `notes:write` (a 403
// `insufficient_scope` naming what it needs otherwise).
//
//     node oidc_notes_server.cjs SECRET_FILE [SERVICE_TTL]
//
// registers a confidential client, `hintgate-service` (client credentials),
// whose secret is read from SECRET_FILE, and a public one,
// `hintgate-device` (the device grant and refresh); the service account's
// tokens live SERVICE_TTL seconds (default 3600), and it prints `serving MCP at http://127.0.0.1:PORT/mcp`
// on stderr once it listens. Run with NODE_PATH naming the node_modules
// that hold oidc-provider.
//
// Test endpoints (no token is ever shown but by /test/issued):
//
//     GET  /test/state   tokens issued, still standing, and revoked; writes
//                        refused; the notes
//     GET  /test/issued  every access and refresh token issued, so that a
//                        test can search what hintgate wrote for them
//     POST /test/expire  the resource server takes no token issued so far

'use strict';

const fs = require('node:fs');
const http = require('node:http');
const { default: Provider, errors } = require('oidc-provider');

const secret = fs.readFileSync(process.argv[2], 'utf8').trim();
const serviceTtl = Number(process.argv[3] || 3600);
const notes = ['the first note'];
const issued = [];
const counts = { client_credentials: 0, access: 0, refresh: 0 };
const byKind = { client_credentials: [], access: [], refresh: [] };
let revoked = 0;
let expired = new Set();
let refusedWrites = 0;

const server = http.createServer();
server.listen(0, '127.0.0.1', () => {
  const base = `http://127.0.0.1:${server.address().port}`;
  const resource = `${base}/mcp`;
  const metadataUrl = `${base}/.well-known/oauth-protected-resource/mcp`;
  const provider = new Provider(base, {
    clients: [
      {
        client_id: 'hintgate-device',
        token_endpoint_auth_method: 'none',
        grant_types: ['urn:ietf:params:oauth:grant-type:device_code', 'refresh_token'],
        redirect_uris: [],
        response_types: [],
      },
      {
        client_id: 'hintgate-service',
        client_secret: secret,
        grant_types: ['client_credentials'],
        redirect_uris: [],
        response_types: [],
        token_endpoint_auth_method: 'client_secret_basic',
      },
    ],
    scopes: ['openid', 'offline_access', 'notes:read', 'notes:write'],
    features: {
      devInteractions: { enabled: true },
      deviceFlow: { enabled: true },
      clientCredentials: { enabled: true },
      revocation: { enabled: true },
      resourceIndicators: {
        enabled: true,
        defaultResource: () => resource,
        useGrantedResource: () => true,
        getResourceServerInfo: (ctx, asked, client) => {
          if (asked !== resource) {
            throw new errors.InvalidTarget();
          }
          const ttl = client.clientId === 'hintgate-service' ? serviceTtl : 3600;
          return { scope: 'notes:read notes:write', accessTokenFormat: 'opaque', accessTokenTTL: ttl };
        },
      },
    },
  });
  const saved = (kind) => (token) => {
    issued.push(token.jti);
    byKind[kind].push(token.jti);
    counts[kind] += 1;
  };
  provider.on('client_credentials.saved', saved('client_credentials'));
  provider.on('access_token.saved', saved('access'));
  provider.on('refresh_token.saved', saved('refresh'));
  for (const kind of ['client_credentials', 'access_token', 'refresh_token']) {
    provider.on(`${kind}.destroyed`, () => {
      revoked += 1;
    });
  }
  const callback = provider.callback();

  const json = (res, status, body, headers = {}) => {
    const text = JSON.stringify(body);
    res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), ...headers });
    res.end(text);
  };
  const refuse = (res, status, error, scope) => {
    let challenge = `Bearer error="${error}", resource_metadata="${metadataUrl}"`;
    if (scope) {
      challenge += `, scope="${scope}"`;
    }
    res.writeHead(status, { 'www-authenticate': challenge, 'content-length': 0 });
    res.end();
  };

  const mcp = async (req, res, body) => {
    const header = req.headers.authorization || '';
    const value = header.startsWith('Bearer ') ? header.slice(7) : '';
    const token = value
      ? (await provider.AccessToken.find(value)) || (await provider.ClientCredentials.find(value))
      : undefined;
    if (!token || token.isExpired || expired.has(value) || token.aud !== resource) {
      refuse(res, 401, 'invalid_token');
      return;
    }
    const scopes = new Set((token.scope || '').split(' '));
    let message;
    try {
      message = JSON.parse(body);
    } catch {
      json(res, 400, {});
      return;
    }
    if (message.id === undefined) {
      res.writeHead(202, { 'content-length': 0 });
      res.end();
      return;
    }
    const answer = (result) => json(res, 200, { jsonrpc: '2.0', id: message.id, result });
    const params = message.params || {};
    switch (message.method) {
      case 'initialize':
        answer({ protocolVersion: '2025-11-25', capabilities: { tools: {} }, serverInfo: { name: 'notes', version: '1' } });
        return;
      case 'tools/list':
        answer({
          tools: [
            { name: 'read_notes', description: 'Read every note.', inputSchema: { type: 'object' }, annotations: { readOnlyHint: true } },
            {
              name: 'write_note',
              description: 'Add a note.',
              inputSchema: { type: 'object', properties: { text: { type: 'string' } } },
              annotations: { readOnlyHint: false, destructiveHint: false },
            },
          ],
        });
        return;
      case 'tools/call': {
        const needs = params.name === 'write_note' ? 'notes:write' : 'notes:read';
        if (!scopes.has(needs)) {
          if (needs === 'notes:write') {
            refusedWrites += 1;
          }
          refuse(res, 403, 'insufficient_scope', `notes:read ${needs}`);
          return;
        }
        if (params.name === 'write_note') {
          notes.push(String((params.arguments || {}).text));
          answer({ content: [{ type: 'text', text: `noted (${notes.length} notes)` }] });
        } else {
          answer({ content: [{ type: 'text', text: notes.join('\n') }] });
        }
        return;
      }
      default:
        json(res, 200, { jsonrpc: '2.0', id: message.id, error: { code: -32601, message: 'Method not found' } });
    }
  };

  server.on('request', (req, res) => {
    const path = req.url.split('?')[0];
    if (path === '/mcp') {
      const chunks = [];
      req.on('data', (chunk) => chunks.push(chunk));
      req.on('end', () => {
        mcp(req, res, Buffer.concat(chunks).toString()).catch(() => json(res, 500, {}));
      });
    } else if (path === '/.well-known/oauth-protected-resource/mcp') {
      json(res, 200, { resource, authorization_servers: [base], scopes_supported: ['notes:read', 'notes:write'] });
    } else if (path === '/test/state') {
      // How many of the tokens issued still stand (not revoked, spent or
      // expired), by kind.
      const live = async (model, jtis) => {
        let count = 0;
        for (const jti of jtis) {
          const found = await model.find(jti);
          if (found && !found.isExpired && !found.consumed) {
            count += 1;
          }
        }
        return count;
      };
      Promise.all([
        live(provider.ClientCredentials, byKind.client_credentials),
        live(provider.AccessToken, byKind.access),
        live(provider.RefreshToken, byKind.refresh),
      ]).then(([cc, access, refresh]) => json(res, 200, {
        issued: counts,
        live: { client_credentials: cc, access, refresh },
        revoked,
        refused_writes: refusedWrites,
        notes,
      }));
    } else if (path === '/test/expire' && req.method === 'POST') {
      expired = new Set(issued);
      json(res, 200, {});
    } else if (path === '/test/issued') {
      json(res, 200, issued);
    } else {
      callback(req, res);
    }
  });
  process.stderr.write(`serving MCP at ${resource}\n`);
});
