// The typed API client: openapi-fetch over the types generated from openapi/openapi.json
// (schema.d.ts), with the session's bearer token attached, renewed once on a 401, and every
// failure turned into an ApiProblem.
import createClient, { type Middleware } from 'openapi-fetch';
import type { paths } from './schema';
import { ApiProblem, parseBody, toProblem } from './problem';
import { SessionEnded, type TokenKeeper } from '../auth/session';

export type Api = ReturnType<typeof createApi>;

/** Requests retried after a token renewal, keyed by the request that was sent. */
const retryable = new WeakMap<Request, Request>();

export function authMiddleware(keeper: TokenKeeper, doFetch: typeof fetch): Middleware {
  return {
    async onRequest({ request }) {
      const token = await keeper.accessToken();
      if (!token) return request;
      request.headers.set('authorization', `Bearer ${token}`);
      // Bodies are streams read once: keep a copy in case the token is refused.
      retryable.set(request, request.clone());
      return request;
    },
    async onResponse({ request, response }) {
      const copy = retryable.get(request);
      retryable.delete(request);
      if (response.status !== 401 || !copy || !keeper.current()) return response;
      // A token we believed fresh was refused (server restarted with a new secret, clock jump):
      // one renewal, one retry; a second refusal ends the session.
      let token: string;
      try {
        token = await keeper.renew();
      } catch (err) {
        if (err instanceof SessionEnded) return response;
        throw err;
      }
      copy.headers.set('authorization', `Bearer ${token}`);
      const retried = await doFetch(copy);
      if (retried.status === 401) keeper.end('The server refused your session. Sign in again.');
      return retried;
    },
  };
}

export function createApi(keeper: TokenKeeper, options: { baseUrl?: string; fetch?: typeof fetch } = {}) {
  const doFetch = options.fetch ?? ((input: Request) => globalThis.fetch(input));
  const client = createClient<paths>({ baseUrl: options.baseUrl ?? '', fetch: doFetch });
  client.use(authMiddleware(keeper, doFetch as typeof fetch));
  return client;
}

/** The data of an openapi-fetch result, or its problem thrown. */
export async function unwrap<T>(
  call: Promise<{ data?: T; error?: unknown; response: Response }>,
): Promise<T> {
  let result: { data?: T; error?: unknown; response: Response };
  try {
    result = await call;
  } catch (err) {
    if (err instanceof ApiProblem || err instanceof SessionEnded) throw err;
    throw new ApiProblem(toProblem(0, '', err instanceof Error ? err.message : ''));
  }
  const { data, error, response } = result;
  if (response.ok && data !== undefined) return data;
  const body = typeof error === 'string' ? parseBody(error) : error;
  throw new ApiProblem(toProblem(response.status, body, response.statusText));
}

/**
 * `read` for calls that race one another, with only the latest call's outcome passed on: an
 * answer (or a failure) that arrives after a later call was made is dropped as `null`. Two
 * reads of one job, the earlier answered last, would otherwise put back the state the later
 * one had replaced (a job row read before its funding, over the one read after).
 */
export function latestOnly<T>(read: () => Promise<T>): () => Promise<{ value: T } | null> {
  let calls = 0;
  return async () => {
    const call = ++calls;
    try {
      const value = await read();
      return call === calls ? { value } : null;
    } catch (err) {
      if (call !== calls) return null;
      throw err;
    }
  };
}
