import { describe, expect, it } from 'vitest';
import { SessionEnded, sessionFromTokens, TokenKeeper, tokenState, type TokenReply } from './session';

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

function reply(n: number): TokenReply {
  return {
    access_token: `access-${n}`,
    expires_in: 900,
    refresh_token: `refresh-${n}`,
    refresh_expires_in: 3600,
    address: '0xabc',
    roles: ['requester'],
  };
}

describe('tokenState', () => {
  it('refreshes within the margin before access expiry and ends after refresh expiry', () => {
    const s = sessionFromTokens(reply(1), 0);
    expect(tokenState(s, 0)).toBe('fresh');
    expect(tokenState(s, 900_000 - 29_000)).toBe('refresh');
    expect(tokenState(s, 3_600_000 - 29_000)).toBe('expired');
  });
});

describe('TokenKeeper', () => {
  it('refreshes once for concurrent callers and persists the new pair', async () => {
    let clock = 0;
    let calls = 0;
    const storage = new MemoryStorage();
    const keeper = new TokenKeeper(
      storage,
      async (token) => {
        calls += 1;
        expect(token).toBe('refresh-1');
        return reply(2);
      },
      () => clock,
    );
    keeper.set(sessionFromTokens(reply(1), 0));
    expect(await keeper.accessToken()).toBe('access-1');
    clock = 880_000;
    const tokens = await Promise.all([keeper.accessToken(), keeper.accessToken(), keeper.accessToken()]);
    expect(tokens).toEqual(['access-2', 'access-2', 'access-2']);
    expect(calls).toBe(1);
    // A reload picks the renewed session up from storage.
    const reloaded = new TokenKeeper(storage, async () => reply(3), () => clock);
    expect(reloaded.current()?.accessToken).toBe('access-2');
  });

  it('ends the session with a reason when refresh is refused', async () => {
    const storage = new MemoryStorage();
    const keeper = new TokenKeeper(storage, async () => {
      throw new Error('the token has expired; sign in again or refresh');
    }, () => 880_000);
    const reasons: (string | undefined)[] = [];
    keeper.set(sessionFromTokens(reply(1), 0));
    keeper.subscribe((_s, reason) => reasons.push(reason));
    await expect(keeper.accessToken()).rejects.toBeInstanceOf(SessionEnded);
    expect(keeper.current()).toBeNull();
    expect(storage.map.size).toBe(0);
    expect(reasons[0]).toMatch(/could not be renewed .*Sign in again/);
  });

  it('drops a stored session whose refresh token has expired', () => {
    const storage = new MemoryStorage();
    new TokenKeeper(storage, async () => reply(2), () => 0).set(sessionFromTokens(reply(1), 0));
    const later = new TokenKeeper(storage, async () => reply(2), () => 4_000_000);
    expect(later.current()).toBeNull();
  });
});
