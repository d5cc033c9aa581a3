// Server-Sent Events over fetch. The job event stream needs `Authorization: Bearer …`
// (api/src/routes/jobs/events.rs takes the token from that header only), which EventSource
// cannot send, so the stream is read with fetch and parsed here per the WHATWG grammar.
import { toProblem, parseBody, ApiProblem } from './problem';

export interface SseMessage {
  id: string | null;
  event: string;
  data: string;
}

/** Incremental parser: feed it text as it arrives, get complete messages back. */
export class SseParser {
  private buffer = '';
  private data: string[] = [];
  private event = '';
  private id: string | null = null;
  /** The last id seen, kept across messages (what `Last-Event-ID` resumes from). */
  lastEventId: string | null = null;

  feed(chunk: string): SseMessage[] {
    this.buffer += chunk;
    const out: SseMessage[] = [];
    for (;;) {
      const match = /\r\n|\r|\n/.exec(this.buffer);
      if (!match) break;
      // A lone '\r' at the end may be the first half of '\r\n': wait for more text.
      if (match[0] === '\r' && match.index === this.buffer.length - 1) break;
      const line = this.buffer.slice(0, match.index);
      this.buffer = this.buffer.slice(match.index + match[0].length);
      const message = this.line(line);
      if (message) out.push(message);
    }
    return out;
  }

  private line(line: string): SseMessage | null {
    if (line === '') {
      if (this.data.length === 0) {
        this.event = '';
        return null;
      }
      const message = { id: this.id, event: this.event || 'message', data: this.data.join('\n') };
      this.data = [];
      this.event = '';
      return message;
    }
    if (line.startsWith(':')) return null;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    switch (field) {
      case 'data':
        this.data.push(value);
        break;
      case 'event':
        this.event = value;
        break;
      case 'id':
        if (!value.includes('\0')) {
          this.id = value;
          this.lastEventId = value;
        }
        break;
      default:
        // `retry` and unknown fields: the stream's own reconnect policy is ours.
        break;
    }
    return null;
  }
}

export interface StreamOptions {
  url: string;
  /** Called before every (re)connection, so a refreshed token is used. */
  token: () => Promise<string | null>;
  onMessage: (message: SseMessage) => void;
  /** Called with the error of a failed connection before the next attempt. */
  onError?: (error: unknown, attempt: number) => void;
  onOpen?: () => void;
  signal: AbortSignal;
  /** Resume after this event id. */
  lastEventId?: string | null;
  fetch?: typeof fetch;
  /** Delay before reconnection attempt n (1-based). */
  backoffMs?: (attempt: number) => number;
}

const defaultBackoff = (attempt: number) => Math.min(30_000, 500 * 2 ** (attempt - 1));

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => {
      clearTimeout(timer);
      resolve();
    }, { once: true });
  });
}

/**
 * Follows an SSE stream until the server ends it (the job stream ends once the job is terminal)
 * or `signal` aborts. Dropped connections are resumed with `Last-Event-ID`; a 4xx answer (other
 * than 429) stops with its problem, since retrying cannot fix it.
 */
export async function followStream(options: StreamOptions): Promise<void> {
  const doFetch = options.fetch ?? fetch;
  const backoff = options.backoffMs ?? defaultBackoff;
  let lastEventId = options.lastEventId ?? null;
  let attempt = 0;
  while (!options.signal.aborted) {
    const parser = new SseParser();
    try {
      const headers: Record<string, string> = { accept: 'text/event-stream' };
      const token = await options.token();
      if (token) headers.authorization = `Bearer ${token}`;
      if (lastEventId) headers['last-event-id'] = lastEventId;
      const response = await doFetch(options.url, { headers, signal: options.signal, cache: 'no-store' });
      if (!response.ok) {
        const problem = toProblem(response.status, parseBody(await response.text()), response.statusText);
        if (response.status >= 400 && response.status < 500 && response.status !== 429) {
          throw new ApiProblem(problem);
        }
        throw new Error(problem.detail);
      }
      if (!response.body) throw new Error('the event stream has no body');
      attempt = 0;
      options.onOpen?.();
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        for (const message of parser.feed(value)) {
          if (message.id !== null) lastEventId = message.id;
          options.onMessage(message);
        }
      }
      // The server closes the stream only when the job can change no more.
      return;
    } catch (error) {
      if (options.signal.aborted) return;
      if (error instanceof ApiProblem) throw error;
      lastEventId = parser.lastEventId ?? lastEventId;
      attempt += 1;
      options.onError?.(error, attempt);
      await sleep(backoff(attempt), options.signal);
    }
  }
}
