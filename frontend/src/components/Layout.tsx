import { useEffect, useRef, type ReactNode } from 'react';
import { Link } from '../router';
import { usePortal } from '../state';
import { Alert } from './Alert';
import { WalletPanel } from './WalletPanel';

/** Page frame: skip link, header with navigation and wallet, the portal-wide messages, main. */
export function Layout({ title, children, path }: { title: string; children: ReactNode; path: string }) {
  const p = usePortal();
  const main = useRef<HTMLElement>(null);
  const firstRender = useRef(true);
  // After an in-app navigation, move focus to the new page so keyboard and screen-reader users
  // start at its top, as after a page load. Not on the load itself: there the skip link comes first.
  useEffect(() => {
    document.title = `${title} · Shardwork`;
    if (firstRender.current) firstRender.current = false;
    else main.current?.focus();
  }, [title, path]);
  const current = (href: string) => (path.split('?')[0] === href ? 'page' : undefined);
  return (
    <>
      <a className="skip-link" href="#main">
        Skip to content
      </a>
      <header className="site-header">
        <div className="brand">
          <Link href="/">Shardwork</Link>
        </div>
        <nav aria-label="Main">
          <ul>
            <li>
              <Link href="/jobs/new" aria-current={current('/jobs/new')}>
                Post a job
              </Link>
            </li>
            <li>
              <Link href="/jobs" aria-current={current('/jobs')}>
                My jobs
              </Link>
            </li>
            <li>
              <Link href="/earnings" aria-current={current('/earnings')}>
                Earnings
              </Link>
            </li>
          </ul>
        </nav>
        <WalletPanel />
      </header>
      <div className="notices">
        {p.chainProblem && (
          <Alert kind="warning">
            {p.chainProblem}{' '}
            <button type="button" onClick={() => void p.switchNetwork()}>
              Switch network
            </button>
          </Alert>
        )}
        {p.busy && <Alert kind="info">{p.busy}</Alert>}
        {p.error && (
          <Alert kind="error">
            {p.error}{' '}
            <button type="button" className="link" onClick={p.clearError}>
              Dismiss
            </button>
          </Alert>
        )}
        {!p.session && p.sessionNote && <Alert kind="warning">{p.sessionNote}</Alert>}
      </div>
      <main id="main" ref={main} tabIndex={-1}>
        <h1>{title}</h1>
        {children}
      </main>
    </>
  );
}

/** Shown in place of a page that needs a signed-in requester. */
export function SignInFirst({ what }: { what: string }) {
  const p = usePortal();
  return (
    <div className="card">
      <p>Sign in with your Ethereum wallet to {what}.</p>
      {p.wallet.provider && !p.wallet.address && (
        <button type="button" onClick={() => void p.connect()}>
          Connect wallet
        </button>
      )}
      {p.wallet.address && (
        <button type="button" className="primary" onClick={() => void p.signIn()} disabled={Boolean(p.busy) || Boolean(p.chainProblem)}>
          Sign in with Ethereum
        </button>
      )}
    </div>
  );
}
