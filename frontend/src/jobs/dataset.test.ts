import { describe, expect, it } from 'vitest';
import { scanDataset } from './dataset';

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
