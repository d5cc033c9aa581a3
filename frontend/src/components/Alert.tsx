import type { ReactNode } from 'react';

/** A message that screen readers announce: errors assertively, the rest politely. */
export function Alert({ kind, children }: { kind: 'error' | 'info' | 'success' | 'warning'; children: ReactNode }) {
  return (
    <div className={`alert alert--${kind}`} role={kind === 'error' ? 'alert' : 'status'}>
      {children}
    </div>
  );
}
