// RFC 7807 problem details as the API sends them (api/src/problem.rs), and the mapping of their
// field paths onto the inputs of a form.

export interface FieldError {
  path: string;
  message: string;
}

export interface Problem {
  /** Stable URN, e.g. `urn:shardwork:problem:validation`. */
  type: string;
  title: string;
  status: number;
  detail: string;
  errors: FieldError[];
}

/** A failed API call, carrying the server's problem (or one made up for a non-problem reply). */
export class ApiProblem extends Error {
  readonly problem: Problem;

  constructor(problem: Problem) {
    super(problem.detail || problem.title);
    this.name = 'ApiProblem';
    this.problem = problem;
  }

  /** The problem's slug: `validation`, `unauthenticated`, … */
  get kind(): string {
    return problemKind(this.problem);
  }
}

/** Whether `err` is the API saying this signed-in address may not read what it asked (403): a
 * job's feed, curves and result belong to its parties, which the page shows without them. */
export function isForbidden(err: unknown): boolean {
  return err instanceof ApiProblem && err.kind === 'forbidden';
}

export function problemKind(problem: Problem): string {
  const prefix = 'urn:shardwork:problem:';
  return problem.type.startsWith(prefix) ? problem.type.slice(prefix.length) : problem.type;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * Reads a failed response's body as a problem. Anything else a proxy or a crashed server may
 * answer (HTML, empty, plain text) still becomes a problem with a readable detail, so the UI has
 * one error shape to show.
 */
export function toProblem(status: number, body: unknown, statusText = ''): Problem {
  if (isRecord(body) && typeof body.detail === 'string') {
    const errors = Array.isArray(body.errors)
      ? body.errors.filter(
          (e): e is FieldError =>
            isRecord(e) && typeof e.path === 'string' && typeof e.message === 'string',
        )
      : [];
    return {
      type: typeof body.type === 'string' ? body.type : 'about:blank',
      title: typeof body.title === 'string' ? body.title : statusText,
      status: typeof body.status === 'number' ? body.status : status,
      detail: body.detail,
      errors,
    };
  }
  const text = typeof body === 'string' ? body.trim().slice(0, 200) : '';
  const what = status === 0 ? 'The server could not be reached' : `The server answered ${status} ${statusText}`.trim();
  return {
    type: 'about:blank',
    title: statusText || 'Request failed',
    status,
    detail: text && !text.startsWith('<') ? `${what}: ${text}` : what,
    errors: [],
  };
}

/** Parses a response body text as JSON when it is JSON, else returns the text. */
export function parseBody(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/**
 * The form input an API field path belongs to, or null when the path names no input.
 *
 * Paths come rooted at the request (`spec.lora.r`, `spec.lora.target_modules[2]`,
 * `dataset:14`, `dataset_records`); inputs are named by the spec path they edit (`lora.r`,
 * `lora.target_modules`) plus `dataset` for the file.
 */
export function inputForPath(path: string, inputs: ReadonlySet<string>): string | null {
  if (path === 'dataset' || path.startsWith('dataset:') || path === 'dataset_records' || path === 'dataset_cid') {
    return inputs.has('dataset') ? 'dataset' : null;
  }
  let p = path.startsWith('spec.') ? path.slice('spec.'.length) : path;
  // A list input holds every element: `lora.target_modules[2]` → `lora.target_modules`.
  p = p.replace(/\[\d+\]/g, '');
  // A decoding error may point inside a field (`stake.amount.x`): walk up to the nearest input.
  while (p) {
    if (inputs.has(p)) return p;
    const dot = p.lastIndexOf('.');
    if (dot < 0) break;
    p = p.slice(0, dot);
  }
  return null;
}

export interface MappedErrors {
  /** Messages per input. */
  byInput: Record<string, string[]>;
  /** Messages that belong to no input, with their path when they have one. */
  general: string[];
}

/** Splits a problem's field errors between the form's inputs and a general list. */
export function mapProblemToInputs(problem: Problem, inputs: ReadonlySet<string>): MappedErrors {
  const byInput: Record<string, string[]> = {};
  const general: string[] = [];
  for (const error of problem.errors) {
    const input = inputForPath(error.path, inputs);
    if (input) {
      (byInput[input] ??= []).push(error.message);
    } else {
      general.push(error.path ? `${error.path}: ${error.message}` : error.message);
    }
  }
  if (problem.errors.length === 0) general.push(problem.detail);
  return { byInput, general };
}
