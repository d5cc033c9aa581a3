import { describe, expect, it } from 'vitest';
import { createApi, latestOnly, unwrap } from './client';
import { ApiProblem } from './problem';
import { checkSpecForm, defaultForm } from '../jobs/spec';
import { sessionFromTokens, TokenKeeper, type TokenReply } from '../auth/session';

class MemoryStorage {
  map = new Map<string, string>();
  getItem(k: string) {
    return this.map.get(k) ?? null;
  }
  setItem(k: string, v: string) {
    this.map.set(k, v);
  }
  removeItem(k: string) {
    this.map.delete(k);
  }
}

const tokens = (n: number): TokenReply => ({
  access_token: `a${n}`,
  expires_in: 900,
  refresh_token: `r${n}`,
  refresh_expires_in: 3600,
  address: '0xabc',
  roles: ['requester'],
});

const problem = (status: number, detail: string) =>
  new Response(JSON.stringify({ type: 'urn:shardwork:problem:x', title: 't', status, detail }), {
    status,
    headers: { 'content-type': 'application/problem+json' },
  });

/** A scripted server: records each request's method, path and token, answers from `handler`. */
function server(handler: (req: Request, body: string) => Response) {
  const seen: { method: string; path: string; auth: string | null; body: string }[] = [];
  const fetchFn = (async (input: Request) => {
    const body = input.body ? await input.clone().text() : '';
    seen.push({ method: input.method, path: new URL(input.url).pathname, auth: input.headers.get('authorization'), body });
    return handler(input, body);
  }) as unknown as typeof fetch;
  return { seen, fetchFn };
}

describe('createApi', () => {
  it('sends the bearer token and unwraps the typed reply', async () => {
    const keeper = new TokenKeeper(new MemoryStorage(), async () => tokens(2));
    keeper.set(sessionFromTokens(tokens(1), Date.now()));
    const { seen, fetchFn } = server(() => Response.json({ address: '0xabc', roles: ['requester'], expires_at: 1 }));
    const api = createApi(keeper, { baseUrl: 'http://api.test', fetch: fetchFn });
    const me = await unwrap(api.GET('/v1/auth/me'));
    expect(me.address).toBe('0xabc');
    expect(seen).toEqual([{ method: 'GET', path: '/v1/auth/me', auth: 'Bearer a1', body: '' }]);
  });

  it('renews a refused token once and replays the request with its body', async () => {
    const refreshed: string[] = [];
    const keeper = new TokenKeeper(new MemoryStorage(), async (r) => {
      refreshed.push(r);
      return tokens(2);
    });
    keeper.set(sessionFromTokens(tokens(1), Date.now()));
    const { seen, fetchFn } = server((req) =>
      req.headers.get('authorization') === 'Bearer a2'
        ? Response.json({ nonce: 'n', expires_at: '', domain: 'd', chain_id: 1 }, { status: 201 })
        : problem(401, 'the token is not valid'),
    );
    const api = createApi(keeper, { baseUrl: 'http://api.test', fetch: fetchFn });
    const spec = checkSpecForm({ ...defaultForm(new Date()), 'base_model.cid': 'QmYwAPJzv5CZsnA625s3Xf2nemtYgPpHdWEz79ojWnPbdG' }, new Date()).spec!;
    await unwrap(api.POST('/v1/jobs/quote', { body: { spec, dataset_records: 10 } }));
    expect(refreshed).toEqual(['r1']);
    expect(seen.map((s) => s.auth)).toEqual(['Bearer a1', 'Bearer a2']);
    expect(seen[1]!.body).toBe(seen[0]!.body);
    expect(JSON.parse(seen[1]!.body)).toEqual({ spec, dataset_records: 10 });
  });

  it('ends the session when the renewed token is refused too, and throws the problem', async () => {
    const keeper = new TokenKeeper(new MemoryStorage(), async () => tokens(2));
    keeper.set(sessionFromTokens(tokens(1), Date.now()));
    const { fetchFn } = server(() => problem(401, 'the token is not valid'));
    const api = createApi(keeper, { baseUrl: 'http://api.test', fetch: fetchFn });
    await expect(unwrap(api.GET('/v1/auth/me'))).rejects.toSatisfy(
      (e) => e instanceof ApiProblem && e.problem.status === 401,
    );
    expect(keeper.current()).toBeNull();
  });

  it('turns an unreachable server into a problem that says so', async () => {
    const keeper = new TokenKeeper(new MemoryStorage(), async () => tokens(2));
    const api = createApi(keeper, {
      baseUrl: 'http://api.test',
      fetch: (async () => {
        throw new TypeError('Failed to fetch');
      }) as unknown as typeof fetch,
    });
    await expect(unwrap(api.POST('/v1/auth/nonce'))).rejects.toSatisfy(
      (e) => e instanceof ApiProblem && e.problem.detail === 'The server could not be reached',
    );
  });
});

describe('latestOnly', () => {
  /** A read answered when the test says, in any order. */
  function reads() {
    const pending: { resolve: (v: string) => void; reject: (e: Error) => void }[] = [];
    const read = () => new Promise<string>((resolve, reject) => pending.push({ resolve, reject }));
    return { read, pending };
  }

  it('drops an answer that arrives after a later call was made', async () => {
    const { read, pending } = reads();
    const latest = latestOnly(read);
    // The job row read before its funding is answered after the one read after it.
    const before = latest();
    const after = latest();
    pending[1]!.resolve('open');
    pending[0]!.resolve('awaiting_funding');
    expect(await after).toEqual({ value: 'open' });
    expect(await before).toBeNull();
  });

  it("passes the latest call's answer or failure on, and drops an earlier failure", async () => {
    const { read, pending } = reads();
    const latest = latestOnly(read);
    const first = latest();
    pending[0]!.resolve('awaiting_funding');
    expect(await first).toEqual({ value: 'awaiting_funding' });
    const stale = latest();
    const failing = latest();
    pending[1]!.reject(new Error('earlier'));
    pending[2]!.reject(new Error('later'));
    expect(await stale).toBeNull();
    await expect(failing).rejects.toThrow('later');
  });
});
