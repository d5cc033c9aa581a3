// The signed-in session: access and refresh tokens with their expiry, kept in sessionStorage so
// a reload keeps the user signed in (a new tab or a closed browser signs in again), and
// refreshed shortly before the access token expires.

export interface Session {
  address: string;
  roles: string[];
  accessToken: string;
  refreshToken: string;
  /** Local clock, ms: expiry computed from `expires_in` at receipt, so server clock skew does not matter. */
  accessExpiresAt: number;
  refreshExpiresAt: number;
}

/** What `POST /v1/auth/verify` and `/v1/auth/refresh` return. */
export interface TokenReply {
  access_token: string;
  expires_in: number;
  refresh_token: string;
  refresh_expires_in: number;
  address: string;
  roles: string[];
}

/** Refresh this long before expiry, so a request in flight never carries an expired token. */
export const REFRESH_MARGIN_MS = 30_000;

export function sessionFromTokens(reply: TokenReply, nowMs: number): Session {
  return {
    address: reply.address,
    roles: reply.roles,
    accessToken: reply.access_token,
    refreshToken: reply.refresh_token,
    accessExpiresAt: nowMs + reply.expires_in * 1000,
    refreshExpiresAt: nowMs + reply.refresh_expires_in * 1000,
  };
}

export type TokenState = 'fresh' | 'refresh' | 'expired';

export function tokenState(session: Session, nowMs: number): TokenState {
  if (nowMs < session.accessExpiresAt - REFRESH_MARGIN_MS) return 'fresh';
  if (nowMs < session.refreshExpiresAt - REFRESH_MARGIN_MS) return 'refresh';
  return 'expired';
}

const STORAGE_KEY = 'shardwork.session';

export interface SessionStorageLike {
  getItem(key: string): string | null;
  setItem(key: string, value: string): void;
  removeItem(key: string): void;
}

export function loadSession(storage: SessionStorageLike): Session | null {
  try {
    const raw = storage.getItem(STORAGE_KEY);
    if (!raw) return null;
    const s = JSON.parse(raw) as Partial<Session>;
    if (
      typeof s.address === 'string' &&
      typeof s.accessToken === 'string' &&
      typeof s.refreshToken === 'string' &&
      typeof s.accessExpiresAt === 'number' &&
      typeof s.refreshExpiresAt === 'number'
    ) {
      return { roles: [], ...s } as Session;
    }
  } catch {
    // A corrupt entry is the same as none.
  }
  return null;
}

/** Why the session ended, shown to the user. */
export class SessionEnded extends Error {
  constructor(reason: string) {
    super(reason);
    this.name = 'SessionEnded';
  }
}

/**
 * Holds the session and hands out a valid access token, refreshing it once for all concurrent
 * callers. `refresh` calls `POST /v1/auth/refresh`; if it fails the session ends.
 */
export class TokenKeeper {
  private session: Session | null;
  private inflight: Promise<Session> | null = null;
  private listeners = new Set<(s: Session | null, reason?: string) => void>();

  constructor(
    private readonly storage: SessionStorageLike,
    private readonly refresh: (refreshToken: string) => Promise<TokenReply>,
    private readonly now: () => number = Date.now,
  ) {
    this.session = loadSession(storage);
    if (this.session && tokenState(this.session, now()) === 'expired') this.end();
  }

  current(): Session | null {
    return this.session;
  }

  subscribe(listener: (s: Session | null, reason?: string) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  set(session: Session): void {
    this.session = session;
    this.storage.setItem(STORAGE_KEY, JSON.stringify(session));
    this.emit();
  }

  end(reason?: string): void {
    this.session = null;
    this.storage.removeItem(STORAGE_KEY);
    this.emit(reason);
  }

  /** A valid access token, or null when signed out. Throws SessionEnded when refresh fails. */
  async accessToken(): Promise<string | null> {
    const session = this.session;
    if (!session) return null;
    switch (tokenState(session, this.now())) {
      case 'fresh':
        return session.accessToken;
      case 'refresh':
        return (await this.refreshOnce()).accessToken;
      case 'expired':
        this.end('Your session has expired. Sign in again.');
        throw new SessionEnded('Your session has expired. Sign in again.');
    }
  }

  /** Forces a refresh (after a 401 on a token we believed fresh). */
  async renew(): Promise<string> {
    return (await this.refreshOnce()).accessToken;
  }

  private refreshOnce(): Promise<Session> {
    const session = this.session;
    if (!session) return Promise.reject(new SessionEnded('You are signed out.'));
    this.inflight ??= this.refresh(session.refreshToken)
      .then((reply) => {
        const next = sessionFromTokens(reply, this.now());
        this.set(next);
        return next;
      })
      .catch((err: unknown) => {
        const reason = `Your session could not be renewed (${err instanceof Error ? err.message : String(err)}). Sign in again.`;
        this.end(reason);
        throw new SessionEnded(reason);
      })
      .finally(() => {
        this.inflight = null;
      });
    return this.inflight;
  }

  private emit(reason?: string): void {
    for (const l of this.listeners) l(this.session, reason);
  }
}
