import { describe, expect, it } from 'vitest';
import { ApiProblem, inputForPath, isForbidden, mapProblemToInputs, toProblem } from './problem';

const inputs = new Set(['lora.r', 'lora.target_modules', 'stake.amount', 'deadline', 'dataset', 'shards']);

describe('inputForPath', () => {
  it('strips the request root and list indices', () => {
    expect(inputForPath('spec.lora.r', inputs)).toBe('lora.r');
    expect(inputForPath('spec.lora.target_modules[2]', inputs)).toBe('lora.target_modules');
    expect(inputForPath('spec.shards', inputs)).toBe('shards');
  });

  it('sends dataset line errors and record counts to the file input', () => {
    expect(inputForPath('dataset:14', inputs)).toBe('dataset');
    expect(inputForPath('dataset_records', inputs)).toBe('dataset');
    expect(inputForPath('dataset', inputs)).toBe('dataset');
  });

  it('walks up from a path inside a field to the nearest input', () => {
    expect(inputForPath('spec.stake.amount.digits', inputs)).toBe('stake.amount');
  });

  it('returns null for paths no input edits', () => {
    expect(inputForPath('spec.version', inputs)).toBeNull();
    expect(inputForPath('spec', inputs)).toBeNull();
    expect(inputForPath('', inputs)).toBeNull();
    expect(inputForPath('model.hidden_size', inputs)).toBeNull();
  });
});

describe('mapProblemToInputs', () => {
  it('groups messages per input and keeps the rest with their path', () => {
    const problem = toProblem(422, {
      type: 'urn:shardwork:problem:validation',
      title: 'The request breaks a rule',
      status: 422,
      detail: 'spec.lora.r: 0 is outside 1..=256; …',
      errors: [
        { path: 'spec.lora.r', message: '0 is outside 1..=256' },
        { path: 'spec.lora.target_modules[1]', message: '"val ue" is not a module name' },
        { path: 'spec.lora.target_modules[2]', message: '"query" is listed twice' },
        { path: 'spec.version', message: 'version 2 is not supported' },
      ],
    });
    const mapped = mapProblemToInputs(problem, inputs);
    expect(mapped.byInput['lora.r']).toEqual(['0 is outside 1..=256']);
    expect(mapped.byInput['lora.target_modules']).toHaveLength(2);
    expect(mapped.general).toEqual(['spec.version: version 2 is not supported']);
  });

  it('shows the detail when a problem names no field', () => {
    const problem = toProblem(409, {
      type: 'urn:shardwork:problem:conflict',
      title: 'Conflict',
      status: 409,
      detail: 'a job that is open cannot be cancelled',
    });
    expect(mapProblemToInputs(problem, inputs)).toEqual({
      byInput: {},
      general: ['a job that is open cannot be cancelled'],
    });
  });
});

describe('toProblem', () => {
  it('turns a proxy error page into a readable problem', () => {
    const p = toProblem(502, '<html><body>Bad gateway</body></html>', 'Bad Gateway');
    expect(p.detail).toBe('The server answered 502 Bad Gateway');
    expect(p.errors).toEqual([]);
  });

  it('keeps plain-text bodies and drops malformed error entries', () => {
    expect(toProblem(500, 'database is locked', 'Internal Server Error').detail).toBe(
      'The server answered 500 Internal Server Error: database is locked',
    );
    const p = toProblem(400, { detail: 'bad', errors: [{ path: 1 }, { path: 'x', message: 'y' }] });
    expect(p.errors).toEqual([{ path: 'x', message: 'y' }]);
  });

  it('says when the server could not be reached', () => {
    expect(toProblem(0, '').detail).toBe('The server could not be reached');
  });
});

describe('isForbidden', () => {
  it('is true for the API refusing a signed-in address, and only for that', () => {
    const forbidden = new ApiProblem(toProblem(403, { type: 'urn:shardwork:problem:forbidden', title: 'Forbidden', status: 403, detail: 'not a party' }, 'Forbidden'));
    expect(isForbidden(forbidden)).toBe(true);
    const missing = new ApiProblem(toProblem(404, { type: 'urn:shardwork:problem:not-found', title: 'Not found', status: 404, detail: 'no job' }, 'Not Found'));
    expect(isForbidden(missing)).toBe(false);
    expect(isForbidden(new Error('network'))).toBe(false);
  });
});
