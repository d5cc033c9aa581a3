import { formatEther, formatGwei } from 'viem';

/**
 * A job id short enough for a table cell yet unique among a requester's jobs. Job ids are
 * UUIDv7: their first 8 hex digits are the top of a millisecond timestamp, shared by every job
 * posted within about a minute, so the short form keeps the random tail too.
 */
export function shortJobId(id: string): string {
  return id.length > 13 ? `${id.slice(0, 8)}…${id.slice(-4)}` : id;
}

export function shortAddress(address: string): string {
  return address.length > 12 ? `${address.slice(0, 6)}…${address.slice(-4)}` : address;
}

function trim(text: string, digits: number): string {
  const [whole, frac = ''] = text.split('.');
  const cut = frac.slice(0, digits).replace(/0+$/, '');
  return `${whole}${cut ? `.${cut}` : ''}`;
}

/**
 * Wei as ETH with at most `digits` decimals, trailing zeros dropped. An amount too small to
 * show in ETH is shown in gwei (or wei), never as a misleading "0 ETH".
 */
export function eth(wei: bigint | string, digits = 4): string {
  const value = typeof wei === 'string' ? BigInt(wei) : wei;
  const shown = trim(formatEther(value), digits);
  if (shown !== '0' || value === 0n) return `${shown} ETH`;
  const gwei = trim(formatGwei(value), 3);
  return gwei !== '0' ? `${gwei} gwei` : `${value} wei`;
}

export function bytes(n: number): string {
  if (n < 1024) return `${n} B`;
  if (n < 1024 ** 2) return `${(n / 1024).toFixed(1)} KiB`;
  if (n < 1024 ** 3) return `${(n / 1024 ** 2).toFixed(1)} MiB`;
  return `${(n / 1024 ** 3).toFixed(2)} GiB`;
}

export function when(iso: string): string {
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? iso : d.toLocaleString();
}

export const STATUS_LABEL: Record<string, string> = {
  awaiting_funding: 'Awaiting funding',
  open: 'Open',
  completed: 'Completed',
  cancelled: 'Cancelled',
  refunded: 'Refunded',
};

export function statusLabel(status: string): string {
  return STATUS_LABEL[status] ?? status;
}

/** A score with `digits` decimals; a missing one as an em dash. */
export function fixed(value: number | null | undefined, digits: number): string {
  return value === null || value === undefined || !Number.isFinite(value) ? '—' : value.toFixed(digits);
}

/** The text with its first letter in capitals ("held-out loss" → "Held-out loss"). */
export function capitalise(text: string): string {
  return text.charAt(0).toUpperCase() + text.slice(1);
}
