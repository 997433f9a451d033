// The web page at /ui: the files of the top-level ui/ folder (HTML, CSS, browser JS modules),
// read once when the app is built and served from memory, so no request path ever reaches the
// file system. The page holds no data and is served without the admin key; everything it shows
// comes from the /v1/rl routes, which ask for the key.

import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { extname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import { Type } from '@sinclair/typebox';
import { ErrorAnswer } from '../api/error-schema.ts';
import { GatewayError } from '../api/errors.ts';

// ../../ui from src/http/ (tsx) is the top-level ui/; from dist/src/http/ it is dist/ui, which the
// build copies there, as it does proto/.
const UI_DIR = fileURLToPath(new URL('../../ui/', import.meta.url));

const CONTENT_TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
};

// The page loads nothing from elsewhere and may only talk to this gateway.
const CSP =
  "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

interface UiFile {
  body: Buffer;
  type: string;
  etag: string;
}

/** The servable files of ui/ by name: plain names with a known extension, nothing nested. */
export function readUiFiles(dir = UI_DIR): Map<string, UiFile> {
  const files = new Map<string, UiFile>();
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const type = CONTENT_TYPES[extname(entry.name)];
    if (!entry.isFile() || !type || !/^[a-z0-9][a-z0-9._-]*$/.test(entry.name)) continue;
    const body = readFileSync(join(dir, entry.name));
    files.set(entry.name, { body, type, etag: `"${createHash('sha256').update(body).digest('base64url').slice(0, 22)}"` });
  }
  if (!files.has('index.html')) throw new Error(`the web page's files are missing: no index.html in ${dir}`);
  return files;
}

const fileAnswer = (description: string, types: string[]) => ({
  description,
  content: Object.fromEntries(types.map((t) => [t, { schema: Type.String() }])),
});
const NotModified = Type.Null({ description: 'Not modified (the `If-None-Match` ETag is current).' });
const redirect = (location: string) => Type.Null({ description: `Redirect to the web page (\`Location: ${location}\`).` });

export const uiRoutes: FastifyPluginAsync = async (app) => {
  const files = readUiFiles();

  const send = (req: FastifyRequest, reply: FastifyReply, name: string) => {
    const file = files.get(name);
    if (!file) throw new GatewayError('not_found', `no file ${name} in the web page`);
    // no-cache: the browser revalidates on every load (a 304 when unchanged), so a gateway
    // upgrade never leaves an old page talking to a new API.
    reply.header('cache-control', 'no-cache').header('etag', file.etag).header('x-content-type-options', 'nosniff');
    if (file.type.startsWith('text/html')) reply.header('content-security-policy', CSP).header('referrer-policy', 'no-referrer');
    if (req.headers['if-none-match'] === file.etag) return reply.code(304).send();
    return reply.code(200).type(file.type).send(file.body);
  };

  app.get(
    '/',
    {
      schema: { tags: ['ui'], summary: 'Redirects to the web page', response: { 302: redirect('ui') } },
    },
    (_req, reply) => reply.redirect('ui', 302),
  );

  app.get(
    '/ui',
    {
      schema: {
        tags: ['ui'],
        summary: 'The web page: the fleet and the refits, live',
        response: { 200: fileAnswer('The page.', ['text/html']), 304: NotModified, 404: ErrorAnswer },
      },
    },
    (req, reply) => send(req, reply, 'index.html'),
  );

  // Relative links on the page resolve against /ui, not /ui/: send the trailing slash there.
  app.get(
    '/ui/',
    {
      schema: { tags: ['ui'], summary: 'Redirects to the web page', response: { 302: redirect('../ui') } },
    },
    (_req, reply) => reply.redirect('../ui', 302),
  );

  app.get<{ Params: { file: string } }>(
    '/ui/:file',
    {
      schema: {
        tags: ['ui'],
        summary: 'A file of the web page (its scripts and style sheet)',
        params: Type.Object({ file: Type.String({ description: 'File name, e.g. `app.js`.' }) }),
        response: {
          200: fileAnswer('The file, with its content type.', ['text/javascript', 'text/css', 'text/html', 'image/svg+xml']),
          304: NotModified,
          404: ErrorAnswer,
        },
      },
    },
    (req, reply) => send(req, reply, req.params.file),
  );
};
