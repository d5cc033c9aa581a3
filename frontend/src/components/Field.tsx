// A labelled input with its hint and errors wired for assistive technology: the error list is
// the input's description and marks it invalid.
import type { ReactNode } from 'react';

export interface FieldProps {
  id: string;
  label: string;
  hint?: ReactNode;
  errors?: string[] | undefined;
  children: (aria: { id: string; 'aria-invalid': boolean; 'aria-describedby': string | undefined }) => ReactNode;
}

export function fieldDomId(path: string): string {
  return `f-${path.replace(/[^A-Za-z0-9_-]/g, '-')}`;
}

export function Field({ id, label, hint, errors, children }: FieldProps) {
  const domId = fieldDomId(id);
  const hintId = hint ? `${domId}-hint` : undefined;
  const errorId = errors?.length ? `${domId}-error` : undefined;
  const describedBy = [hintId, errorId].filter(Boolean).join(' ') || undefined;
  return (
    <div className={`field${errors?.length ? ' field--invalid' : ''}`}>
      <label htmlFor={domId}>{label}</label>
      {children({ id: domId, 'aria-invalid': Boolean(errors?.length), 'aria-describedby': describedBy })}
      {hint && (
        <p className="hint" id={hintId}>
          {hint}
        </p>
      )}
      {errorId && (
        <ul className="field-errors" id={errorId} data-field={id}>
          {errors!.map((e, i) => (
            <li key={i}>{e}</li>
          ))}
        </ul>
      )}
    </div>
  );
}
