import { describe, expect, it } from 'vitest';
import { describeShapes, recordShape, scanDataset } from './dataset';

describe('scanDataset', () => {
  it('counts records as the server does and names bad lines', async () => {
    const text = '{"text":"a","label":0}\n\n[1]\nnope\r\n{"text":"b","label":1}';
    const scan = await scanDataset(new Blob([text]));
    expect(scan.records).toBe(4);
    expect(scan.errors).toEqual(['line 3: a record must be a JSON object', 'line 4: not JSON']);
  });

  it('handles lines split across stream chunks', async () => {
    const line = JSON.stringify({ text: 'x'.repeat(70_000), label: 1 });
    const scan = await scanDataset(new Blob([`${line}\n${line}\n`]));
    expect(scan).toMatchObject({ records: 2, errors: [] });
  });
});

describe('record shapes', () => {
  it('tells chat, instruction and labelled records apart as the server does', async () => {
    const lines = [
      '{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}]}',
      '{"messages":[{"role":"user","content":"2+2?"},{"role":"assistant","content":"4"}]}',
      '{"instruction":"Translate","input":"chat","output":"cat"}',
      '{"output":"no instruction"}',
      '{"prompt":"Q","completion":"A"}',
      '{"text":"a review","label":1}',
      '{"text":"plain"}',
      '{"question":"?"}',
    ];
    const scan = await scanDataset(new Blob([lines.join('\n')]));
    expect(scan.shapes).toEqual({ chat: 2, instruction: 2, prompt_completion: 1, labelled: 1, text: 1, unknown: 1 });
    expect(recordShape({ messages: [] })).toBe('chat');
    expect(recordShape({ prompt: 'p', chosen: 'a', rejected: 'b' })).toBe('preference');
    expect(recordShape({ chosen: [], rejected: [] })).toBe('preference');
  });

  it('names a single shape, or the mix, most common first', async () => {
    const chat = '{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}]}\n';
    expect(describeShapes(await scanDataset(new Blob([chat.repeat(3)])))).toBe('chat ({"messages"}) records');
    const mixed = await scanDataset(new Blob([`${chat}{"instruction":"a","output":"b"}\n{"instruction":"c","output":"d"}\n`]));
    expect(describeShapes(mixed)).toBe('2 instruction ({"instruction","input","output"}), 1 chat ({"messages"})');
    expect(describeShapes(await scanDataset(new Blob(['nope\n'])))).toBe('');
  });
});
