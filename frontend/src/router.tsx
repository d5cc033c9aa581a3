// A small History-API router: the portal has five pages, and the API serves index.html for any
// non-API path (api/src/routes/portal.rs), so deep links and reloads work.
import { useEffect, useState, type AnchorHTMLAttributes, type MouseEvent } from 'react';

const listeners = new Set<() => void>();

export function navigate(to: string, replace = false): void {
  if (replace) history.replaceState(null, '', to);
  else history.pushState(null, '', to);
  for (const l of listeners) l();
}

export function usePath(): string {
  const [path, setPath] = useState(() => location.pathname + location.search);
  useEffect(() => {
    const update = () => setPath(location.pathname + location.search);
    listeners.add(update);
    window.addEventListener('popstate', update);
    return () => {
      listeners.delete(update);
      window.removeEventListener('popstate', update);
    };
  }, []);
  return path;
}

export type Route =
  | { page: 'home' }
  | { page: 'post' }
  | { page: 'jobs' }
  | { page: 'job'; id: string }
  | { page: 'earnings' }
  | { page: 'not-found'; path: string };

export function matchRoute(path: string): Route {
  const pathname = path.split('?')[0]!.replace(/\/+$/, '') || '/';
  if (pathname === '/') return { page: 'home' };
  if (pathname === '/jobs/new') return { page: 'post' };
  if (pathname === '/jobs') return { page: 'jobs' };
  if (pathname === '/earnings') return { page: 'earnings' };
  const job = /^\/jobs\/([0-9a-fA-F-]{36})$/.exec(pathname);
  if (job) return { page: 'job', id: job[1]!.toLowerCase() };
  return { page: 'not-found', path: pathname };
}

/** An anchor that navigates in place for plain left clicks and stays a real link otherwise. */
export function Link(props: AnchorHTMLAttributes<HTMLAnchorElement> & { href: string }) {
  const { onClick, ...rest } = props;
  const handle = (e: MouseEvent<HTMLAnchorElement>) => {
    onClick?.(e);
    if (e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
    e.preventDefault();
    navigate(props.href);
  };
  return <a {...rest} onClick={handle} />;
}
