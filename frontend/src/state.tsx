// The portal's shared state: the API client and session, the API's chain, and the wallet.
import { createContext, useCallback, useContext, useEffect, useMemo, useState, type ReactNode } from 'react';
import createClient from 'openapi-fetch';
import type { Address, EIP1193Provider } from 'viem';
import { createApi, unwrap, type Api } from './api/client';
import type { paths } from './api/schema';
import { ApiProblem } from './api/problem';
import { sessionFromTokens, TokenKeeper, type Session } from './auth/session';
import { domainMismatch, signInMessage } from './auth/siwe';
import {
  chainIdOf,
  clientsFor,
  injectedProvider,
  knownAccount,
  requestAccount,
  switchChain,
  walletErrorMessage,
  wrongChain,
  type Wallet,
} from './wallet/wallet';
import type { StakeToken } from './wallet/stake';

export interface ChainState {
  /** The chain the API runs on: from `GET /v1/chain`, else from the last sign-in nonce. */
  chainId: number | null;
  escrowAddress: string | null;
  devFunding: boolean;
  /** The ERC-20s a job may be staked in besides ETH (the escrow's allow-list). */
  tokens: StakeToken[];
}

export interface WalletState {
  provider: EIP1193Provider | null;
  clients: Wallet | null;
  address: Address | null;
  chainId: number | null;
  balanceWei: bigint | null;
}

export interface Portal {
  api: Api;
  keeper: TokenKeeper;
  session: Session | null;
  /** Why the last session ended, when it ended by itself. */
  sessionNote: string | null;
  chain: ChainState;
  wallet: WalletState;
  /** A sentence when the wallet's chain is not the API's. */
  chainProblem: string | null;
  busy: string | null;
  error: string | null;
  connect(): Promise<void>;
  signIn(): Promise<void>;
  signOut(): void;
  switchNetwork(): Promise<void>;
  refreshBalance(): Promise<void>;
  clearError(): void;
}

/** Exported for render tests, which provide a portal of their own; the app uses PortalProvider. */
export const PortalContext = createContext<Portal | null>(null);

export function usePortal(): Portal {
  const portal = useContext(PortalContext);
  if (!portal) throw new Error('usePortal outside PortalProvider');
  return portal;
}

/** A sentence for any error the portal shows. */
export function errorMessage(err: unknown): string {
  if (err instanceof ApiProblem) return err.message;
  return walletErrorMessage(err);
}

export function PortalProvider({ children }: { children: ReactNode }) {
  const [keeper] = useState(() => {
    // Refresh goes around the authenticated client, which would otherwise wait on itself.
    const raw = createClient<paths>({ baseUrl: '' });
    return new TokenKeeper(window.sessionStorage, (refresh_token) =>
      unwrap(raw.POST('/v1/auth/refresh', { body: { refresh_token } })),
    );
  });
  const api = useMemo(() => createApi(keeper), [keeper]);
  const [session, setSession] = useState<Session | null>(() => keeper.current());
  const [sessionNote, setSessionNote] = useState<string | null>(null);
  const [chain, setChain] = useState<ChainState>({ chainId: null, escrowAddress: null, devFunding: false, tokens: [] });
  const [wallet, setWallet] = useState<WalletState>(() => {
    const provider = injectedProvider();
    return { provider, clients: provider ? clientsFor(provider) : null, address: null, chainId: null, balanceWei: null };
  });
  const [busy, setBusy] = useState<string | null>(null);
  const [error, setError] = useState<string | null>(null);

  useEffect(
    () =>
      keeper.subscribe((s, reason) => {
        setSession(s);
        if (reason) setSessionNote(reason);
      }),
    [keeper],
  );

  useEffect(() => {
    let live = true;
    api
      .GET('/v1/chain')
      .then(({ data }) => {
        if (live && data) {
          setChain({
            chainId: Number(data.chain_id),
            escrowAddress: data.escrow_address,
            devFunding: data.dev_funding,
            tokens: data.tokens ?? [],
          });
        }
      })
      .catch(() => {
        // An API without /v1/chain: the chain comes with the sign-in nonce instead.
      });
    return () => {
      live = false;
    };
  }, [api]);

  const readWallet = useCallback(async (provider: EIP1193Provider, address: Address | null) => {
    const clients = clientsFor(provider);
    const chainId = await chainIdOf(provider);
    const balanceWei = address ? await clients.public.getBalance({ address }) : null;
    setWallet({ provider, clients, address, chainId, balanceWei });
  }, []);

  // Follow the wallet: accounts shared earlier, account and network switches.
  useEffect(() => {
    const provider = wallet.provider;
    if (!provider) return;
    let live = true;
    knownAccount(provider)
      .then((address) => (live ? readWallet(provider, address) : undefined))
      .catch(() => {});
    const onAccounts = (accounts: readonly string[]) => {
      const next = (accounts[0] as Address | undefined) ?? null;
      const current = keeper.current();
      if (current && next?.toLowerCase() !== current.address.toLowerCase()) {
        keeper.end('Your wallet switched accounts, so you were signed out. Sign in with the new account.');
      }
      void readWallet(provider, next);
    };
    const onChain = () => {
      void knownAccount(provider).then((a) => readWallet(provider, a));
    };
    provider.on('accountsChanged', onAccounts);
    provider.on('chainChanged', onChain);
    return () => {
      live = false;
      provider.removeListener('accountsChanged', onAccounts);
      provider.removeListener('chainChanged', onChain);
    };
  }, [wallet.provider, keeper, readWallet]);

  const run = useCallback(async (label: string, work: () => Promise<void>) => {
    setBusy(label);
    setError(null);
    try {
      await work();
    } catch (err) {
      setError(errorMessage(err));
    } finally {
      setBusy(null);
    }
  }, []);

  const connect = useCallback(
    () =>
      run('Connecting to your wallet…', async () => {
        const provider = wallet.provider;
        if (!provider) throw new Error('No Ethereum wallet found in this browser.');
        await readWallet(provider, await requestAccount(provider));
      }),
    [run, wallet.provider, readWallet],
  );

  const signIn = useCallback(
    () =>
      run('Signing in…', async () => {
        const { provider, clients } = wallet;
        if (!provider || !clients) throw new Error('Connect a wallet first.');
        const address = wallet.address ?? (await requestAccount(provider));
        const nonce = await unwrap(api.POST('/v1/auth/nonce'));
        const mismatch = domainMismatch(nonce.domain, location.host);
        if (mismatch) throw new Error(mismatch);
        const apiChain = Number(nonce.chain_id);
        setChain((c) => (c.chainId === null ? { ...c, chainId: apiChain } : c));
        const walletChain = await chainIdOf(provider);
        const wrong = wrongChain(walletChain, apiChain);
        if (wrong) throw new Error(wrong);
        const message = signInMessage({
          domain: nonce.domain,
          origin: location.origin,
          address,
          chainId: apiChain,
          nonce: nonce.nonce,
          issuedAt: new Date(),
          expiresAt: new Date(nonce.expires_at),
        });
        setBusy('Waiting for your signature in the wallet…');
        const signature = await clients.wallet.signMessage({ account: address, message });
        setBusy('Signing in…');
        const tokens = await unwrap(api.POST('/v1/auth/verify', { body: { message, signature, roles: [] } }));
        keeper.set(sessionFromTokens(tokens, Date.now()));
        setSessionNote(null);
        await readWallet(provider, address);
      }),
    [run, wallet, api, keeper, readWallet],
  );

  const signOut = useCallback(() => keeper.end(), [keeper]);

  const switchNetwork = useCallback(
    () =>
      run('Asking your wallet to switch networks…', async () => {
        if (!wallet.provider || chain.chainId === null) return;
        await switchChain(wallet.provider, chain.chainId);
        await readWallet(wallet.provider, wallet.address);
      }),
    [run, wallet.provider, wallet.address, chain.chainId, readWallet],
  );

  const refreshBalance = useCallback(async () => {
    if (wallet.provider) await readWallet(wallet.provider, wallet.address);
  }, [wallet.provider, wallet.address, readWallet]);

  const chainProblem =
    wallet.chainId !== null && chain.chainId !== null ? wrongChain(wallet.chainId, chain.chainId) : null;

  const value: Portal = {
    api,
    keeper,
    session,
    sessionNote,
    chain,
    wallet,
    chainProblem,
    busy,
    error,
    connect,
    signIn,
    signOut,
    switchNetwork,
    refreshBalance,
    clearError: () => setError(null),
  };
  return <PortalContext.Provider value={value}>{children}</PortalContext.Provider>;
}
