// A remote MCP server behind OAuth whose authorization server is
// `oidc-provider` (npm, a certified OpenID Provider and OAuth 2.0
// authorization server), for the end-to-end test of hintgate as a service
// account: the client credentials grant, resource indicators (RFC 8707),
// revocation (RFC 7009) and the metadata are oidc-provider's code. This
// file adds the resource server: a minimal MCP endpoint (JSON answers, no
// session) that takes only access tokens oidc-provider issued for it, found
// in oidc-provider's own token store, with the scope the call needs:
// `read_notes` needs `notes:read`, `write_note` needs `notes:write` (a 403
// `insufficient_scope` naming what it needs otherwise).
//
//     node oidc_notes_server.cjs SECRET_FILE
//
// registers one confidential client, `hintgate-service`, whose secret is
// read from SECRET_FILE, and prints `serving MCP at http://127.0.0.1:PORT/mcp`
// on stderr once it listens. Run with NODE_PATH naming the node_modules
// that hold oidc-provider.
//
// Test endpoints (no token is ever shown but by /test/issued):
//
//     GET /test/state   tokens issued and revoked, writes refused, the notes
//     GET /test/issued  every access token issued, so that a test can
//                       search what hintgate wrote for them

'use strict';

const fs = require('node:fs');
const http = require('node:http');
const { default: Provider, errors } = require('oidc-provider');

const secret = fs.readFileSync(process.argv[2], 'utf8').trim();
const notes = ['the first note'];
const issued = [];
let revoked = 0;
let refusedWrites = 0;

const server = http.createServer();
server.listen(0, '127.0.0.1', () => {
  const base = `http://127.0.0.1:${server.address().port}`;
  const resource = `${base}/mcp`;
  const metadataUrl = `${base}/.well-known/oauth-protected-resource/mcp`;
  const provider = new Provider(base, {
    clients: [
      {
        client_id: 'hintgate-service',
        client_secret: secret,
        grant_types: ['client_credentials'],
        redirect_uris: [],
        response_types: [],
        token_endpoint_auth_method: 'client_secret_basic',
      },
    ],
    scopes: ['notes:read', 'notes:write'],
    features: {
      devInteractions: { enabled: false },
      clientCredentials: { enabled: true },
      revocation: { enabled: true },
      resourceIndicators: {
        enabled: true,
        defaultResource: () => resource,
        useGrantedResource: () => true,
        getResourceServerInfo: (ctx, asked) => {
          if (asked !== resource) {
            throw new errors.InvalidTarget();
          }
          return { scope: 'notes:read notes:write', accessTokenFormat: 'opaque', accessTokenTTL: 3600 };
        },
      },
    },
  });
  provider.on('client_credentials.saved', (token) => issued.push(token.jti));
  provider.on('client_credentials.destroyed', () => {
    revoked += 1;
  });
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
    const token = value ? await provider.ClientCredentials.find(value) : undefined;
    if (!token || token.isExpired || token.aud !== resource) {
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
      json(res, 200, { issued: issued.length, revoked, refused_writes: refusedWrites, notes });
    } else if (path === '/test/issued') {
      json(res, 200, issued);
    } else {
      callback(req, res);
    }
  });
  process.stderr.write(`serving MCP at ${resource}\n`);
});
