import { describe, expect, it } from 'vitest';
import { followStream, SseParser, type SseMessage } from './sse';
import { ApiProblem } from './problem';

describe('SseParser', () => {
  it('parses the frames the API writes', () => {
    const p = new SseParser();
    const text = 'id: 7\nevent: funded\ndata: {"id":7,"kind":"funded"}\n\n';
    expect(p.feed(text)).toEqual([{ id: '7', event: 'funded', data: '{"id":7,"kind":"funded"}' }]);
    expect(p.lastEventId).toBe('7');
  });

  it('joins data lines, skips comments and handles CRLF split across chunks', () => {
    const p = new SseParser();
    expect(p.feed(': keep-alive\r\ndata: a\r')).toEqual([]);
    expect(p.feed('\ndata: b\r\n\r')).toEqual([]);
    expect(p.feed('\n')).toEqual([{ id: null, event: 'message', data: 'a\nb' }]);
  });

  it('waits for the blank line before emitting, and drops empty frames', () => {
    const p = new SseParser();
    expect(p.feed('event: x\n\n')).toEqual([]);
    expect(p.feed('data: partial')).toEqual([]);
    expect(p.feed('\n')).toEqual([]);
    expect(p.feed('\n')).toEqual([{ id: null, event: 'message', data: 'partial' }]);
  });
});

function streamOf(chunks: string[]): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  return new ReadableStream({
    start(controller) {
      for (const c of chunks) controller.enqueue(encoder.encode(c));
      controller.close();
    },
  });
}

describe('followStream', () => {
  it('sends the token, resumes after a dropped connection from the last id, and ends with the stream', async () => {
    const calls: Record<string, string>[] = [];
    const responses = [
      () => {
        let pulls = 0;
        // One frame arrives, then the connection drops.
        const body = new ReadableStream<Uint8Array>({
          pull(c) {
            pulls += 1;
            if (pulls === 1) c.enqueue(new TextEncoder().encode('id: 1\nevent: created\ndata: {}\n\n'));
            else c.error(new TypeError('network error'));
          },
        });
        return new Response(body, { status: 200 });
      },
      () => new Response(streamOf(['id: 2\nevent: funded\ndata: {}\n\n']), { status: 200 }),
    ];
    const seen: SseMessage[] = [];
    const errors: unknown[] = [];
    await followStream({
      url: '/v1/jobs/x/events/stream',
      token: async () => 'tok',
      onMessage: (m) => seen.push(m),
      onError: (e) => errors.push(e),
      signal: new AbortController().signal,
      backoffMs: () => 0,
      fetch: async (_url, init) => {
        calls.push(init?.headers as Record<string, string>);
        return responses[calls.length - 1]!();
      },
    });
    expect(seen.map((m) => m.event)).toEqual(['created', 'funded']);
    expect(errors).toHaveLength(1);
    expect(calls[0]).toMatchObject({ authorization: 'Bearer tok' });
    expect(calls[0]).not.toHaveProperty('last-event-id');
    expect(calls[1]).toMatchObject({ 'last-event-id': '1' });
  });

  it('stops on a client error with the server problem', async () => {
    const body = JSON.stringify({ type: 'urn:shardwork:problem:not-found', title: 'Not found', status: 404, detail: 'no job x' });
    await expect(
      followStream({
        url: '/v1/jobs/x/events/stream',
        token: async () => null,
        onMessage: () => {},
        signal: new AbortController().signal,
        fetch: async () => new Response(body, { status: 404 }),
      }),
    ).rejects.toSatisfy((e) => e instanceof ApiProblem && e.message === 'no job x');
  });
});
