/**
 * The programs TypeScript files spawn, read from their syntax trees: the argument vectors given to
 * the calls that start a process (spawn, execFile, their Sync forms, the promisified `run`, the
 * netns helpers' `exec`, argv runners, withMounts, peer, and any function that hands one of its
 * parameters on to them as the program), with words resolved through the file's own constants,
 * ternaries, destructuring, for-of lists and object literals. What only the running program knows
 * (a parameter, a computed path) is `null` and names nothing. Calls are matched by name, not by
 * type: a function that merely shares a spawner's name is read as one, so a mistake shows as an
 * extra program to list, never as a program missed.
 */
import ts from 'typescript';
import { addPrograms, type Argv } from './argv.ts';

/** Spawning calls by name, with the index of the argument that is the program (or a whole argument vector). */
export type Spawners = Map<string, number>;

const KNOWN_SPAWNERS: Spawners = new Map([
  ...['spawn', 'spawnSync', 'execFile', 'execFileSync', 'exec', 'execSync', 'run', 'execRunner', 'peer'].map((n) => [n, 0] as const),
  ['withMounts', 1],
]);
/** More alternatives than this (ternaries multiplied) are cut: the scan wants names, not every combination. */
const MAX_ALTERNATIVES = 64;
/** The value a parameter takes while a function is tried as a spawner: named as a program, it is one. */
const PARAMETER = 'weft-scan-parameter';

type Declarations = Map<string, ts.Node[]>;
type FunctionLike = ts.FunctionDeclaration | ts.MethodDeclaration | ts.ArrowFunction | ts.FunctionExpression;

/** One file, parsed, with its declarations by name, its calls and its named functions. */
export class TypeScriptFile {
  readonly source: ts.SourceFile;
  readonly declarations: Declarations = new Map();
  readonly calls: ts.CallExpression[] = [];
  readonly functions: { name: string; fn: FunctionLike }[] = [];

  constructor(text: string, file: string) {
    this.source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
    const visit = (node: ts.Node): void => {
      if (ts.isVariableDeclaration(node)) this.#declare(node.name, node);
      if (ts.isCallExpression(node)) this.calls.push(node);
      const fn = namedFunction(node);
      if (fn) this.functions.push(fn);
      ts.forEachChild(node, visit);
    };
    visit(this.source);
  }

  #declare(name: ts.Node, at: ts.Node): void {
    if (ts.isIdentifier(name)) this.declarations.set(name.text, [...(this.declarations.get(name.text) ?? []), at]);
    else if (ts.isArrayBindingPattern(name)) for (const e of name.elements) if (ts.isBindingElement(e)) this.#declare(e.name, e);
  }
}

/**
 * The spawning calls across `files`: the known ones, `const run = promisify(execFile)`, and every
 * function that hands a parameter on as the program (`exec(cmd, ...args)`, `(...cmd) => ns.exec(...cmd)`,
 * `inNode(node, cmd)` building `ip netns exec`), found again until no new one appears.
 */
export function spawnerNames(files: readonly TypeScriptFile[]): Spawners {
  const spawners: Spawners = new Map(KNOWN_SPAWNERS);
  for (let size = 0; size !== spawners.size;) {
    size = spawners.size;
    for (const file of files) {
      for (const [name, declarations] of file.declarations) {
        const init = declarations.map((d) => (ts.isVariableDeclaration(d) && d.initializer ? unwrap(d.initializer) : undefined))[0];
        const promisified = init && ts.isCallExpression(init) && isPromisify(init) ? calleeName(init) : undefined;
        if (promisified !== undefined && spawners.has(promisified) && !spawners.has(name)) spawners.set(name, spawners.get(promisified)!);
      }
      for (const { name, fn } of file.functions) {
        if (spawners.has(name)) continue;
        const at = fn.parameters.findIndex((p) => ts.isIdentifier(p.name) && handsOn(file, fn, p.name.text, spawners));
        if (at >= 0) spawners.set(name, at);
      }
    }
  }
  return spawners;
}

/** Whether `fn` spawns its parameter `parameter` as the program. */
function handsOn(file: TypeScriptFile, fn: FunctionLike, parameter: string, spawners: Spawners): boolean {
  const resolver = new Resolver(file.declarations, spawners, parameter);
  const found = new Map<string, Set<string>>();
  const visit = (node: ts.Node): void => {
    if (ts.isCallExpression(node) && !isMethodRun(node)) for (const argv of resolver.spawned(node)) addPrograms(argv, '', found);
    ts.forEachChild(node, visit);
  };
  if (fn.body) visit(fn.body);
  return found.has(PARAMETER);
}

/** Adds to `found` each program `file` spawns through `spawners`, with the file:line it is seen on. */
export function addTypeScriptPrograms(file: TypeScriptFile, spawners: Spawners, found: Map<string, Set<string>>): void {
  const resolver = new Resolver(file.declarations, spawners);
  for (const call of file.calls) {
    const line = file.source.getLineAndCharacterOfPosition(call.getStart()).line + 1;
    for (const argv of resolver.spawned(call)) addPrograms(argv, `${file.source.fileName}:${line}`, found);
  }
}

class Resolver {
  readonly #declarations: Declarations;
  readonly #spawners: Spawners;
  readonly #parameter: string | undefined;
  #depth = 0;

  /** With `parameter`, that name stands for {@link PARAMETER} (a word, or a whole vector when spread). */
  constructor(declarations: Declarations, spawners: Spawners, parameter?: string) {
    this.#declarations = declarations;
    this.#spawners = spawners;
    this.#parameter = parameter;
  }

  /** The argument vectors `call` starts, when it is one of the spawning calls. */
  spawned(call: ts.CallExpression): Argv[] {
    const name = calleeName(call);
    const at = name === undefined || isPromisify(call) || this.#isRegExpExec(call) ? undefined : this.#spawners.get(name);
    if (at === undefined || call.arguments.length <= at) return [];
    const [first, ...rest] = call.arguments.slice(at);
    if (ts.isSpreadElement(first!)) return this.list(call.arguments.slice(at));
    const whole = this.#destructuredFrom(first!);
    if (whole.length > 0) return whole;
    const programs = this.words(first!).filter((w): w is string => w !== null);
    // spawn(file, [args], options) takes its arguments as an array; exec(cmd, ...args) one by one.
    const restArgv = rest.length > 0 && this.argvs(rest[0]!).length > 0 ? this.argvs(rest[0]!) : this.list(rest);
    return [...this.argvs(first!), ...programs.flatMap((p) => restArgv.map((r) => [p, ...r]))];
  }

  /** `re.exec(text)` with `re` a regular expression (literal, or a name given one), not a process. */
  #isRegExpExec(call: ts.CallExpression): boolean {
    const callee = unwrap(call.expression);
    if (!ts.isPropertyAccessExpression(callee) || callee.name.text !== 'exec') return false;
    const isRegExp = (e: ts.Node): boolean => ts.isRegularExpressionLiteral(e)
      || (ts.isNewExpression(e) && ts.isIdentifier(e.expression) && e.expression.text === 'RegExp');
    const receiver = unwrap(callee.expression);
    if (isRegExp(receiver)) return true;
    return ts.isIdentifier(receiver)
      && this.#declared(receiver.text).some((d) => ts.isVariableDeclaration(d) && !!d.initializer && isRegExp(unwrap(d.initializer)));
  }

  /** The words `expr` may be: literals, resolved names, both sides of a ternary; `null` for anything else. */
  words(expr: ts.Node): (string | null)[] {
    return this.#guard(() => {
      const e = unwrap(expr);
      if (ts.isStringLiteral(e) || ts.isNoSubstitutionTemplateLiteral(e)) return [e.text];
      if (ts.isTemplateExpression(e)) return [e.head.text + e.templateSpans.map((s) => `\${}${s.literal.text}`).join('')];
      if (ts.isConditionalExpression(e)) return [...this.words(e.whenTrue), ...this.words(e.whenFalse)];
      if (ts.isBinaryExpression(e) && isFallback(e.operatorToken.kind)) return [...this.words(e.left), ...this.words(e.right)];
      if (ts.isPropertyAccessExpression(e)) return this.properties(e.expression, e.name.text).flatMap((v) => this.words(v));
      if (!ts.isIdentifier(e)) return [null];
      if (e.text === this.#parameter) return [PARAMETER];
      const found = this.#declared(e.text).flatMap((d) => this.#wordsOf(d));
      return found.length > 0 ? found : [null];
    }, [null]);
  }

  /** The argument vectors `expr` may be (array literals with spreads, resolved names); none when unknown. */
  argvs(expr: ts.Node): Argv[] {
    return this.#guard(() => {
      const e = unwrap(expr);
      if (ts.isArrayLiteralExpression(e)) return this.list(e.elements);
      if (ts.isConditionalExpression(e)) return [...this.argvs(e.whenTrue), ...this.argvs(e.whenFalse)];
      if (!ts.isIdentifier(e)) return [];
      if (e.text === this.#parameter) return [[PARAMETER]];
      return this.#declared(e.text).flatMap((d) => {
        if (ts.isVariableDeclaration(d)) return d.initializer ? this.argvs(d.initializer) : [];
        if (!ts.isBindingElement(d) || !d.dotDotDotToken || !ts.isArrayBindingPattern(d.parent)) return [];
        const at = d.parent.elements.indexOf(d);
        return this.#destructured(d.parent).map((v) => v.slice(at));
      });
    }, []);
  }

  /** The argument vectors a list of expressions may make (spreads spliced in), every combination up to the cap. */
  list(elements: readonly ts.Expression[]): Argv[] {
    let out: Argv[] = [[]];
    for (const el of elements) {
      const parts: Argv[] = ts.isSpreadElement(el) ? this.argvs(el.expression) : this.words(el).map((w) => [w]);
      const options = parts.length > 0 ? parts : [[null]];
      out = out.flatMap((head) => options.map((p) => [...head, ...p])).slice(0, MAX_ALTERNATIVES);
    }
    return out;
  }

  /** The values of property `name` of the object literals `base` may be (`TOOLS[family].save`, `o.x`). */
  properties(base: ts.Expression, name: string): ts.Expression[] {
    return this.#objects(base).flatMap((o) => o.properties.flatMap((p) =>
      ts.isPropertyAssignment(p) && propertyName(p.name) === name ? [p.initializer] : []));
  }

  #objects(expr: ts.Expression): ts.ObjectLiteralExpression[] {
    const e = unwrap(expr);
    if (ts.isObjectLiteralExpression(e)) return [e];
    if (ts.isElementAccessExpression(e)) {
      const values = this.#objects(e.expression).flatMap((o) => o.properties);
      return values.flatMap((p) => (ts.isPropertyAssignment(p) ? this.#objects(p.initializer) : []));
    }
    if (ts.isPropertyAccessExpression(e)) return this.properties(e.expression, e.name.text).flatMap((v) => this.#objects(v));
    if (!ts.isIdentifier(e)) return [];
    return this.#declared(e.text).flatMap((d) => (ts.isVariableDeclaration(d) && d.initializer ? this.#objects(d.initializer) : []));
  }

  #wordsOf(d: ts.Node): (string | null)[] {
    if (ts.isVariableDeclaration(d)) {
      const loop = d.parent.parent;
      if (ts.isForOfStatement(loop)) return this.argvs(loop.expression).flat();
      return d.initializer ? this.words(d.initializer) : [null];
    }
    if (ts.isBindingElement(d) && ts.isArrayBindingPattern(d.parent) && !d.dotDotDotToken) {
      const at = d.parent.elements.indexOf(d);
      return this.#destructured(d.parent).map((v) => v[at] ?? null);
    }
    return [null];
  }

  /** For `const [file, ...args] = argv; spawn(file, args)`: argv, from the word `name` was taken at. */
  #destructuredFrom(name: ts.Node): Argv[] {
    const e = unwrap(name);
    if (!ts.isIdentifier(e) || e.text === this.#parameter) return [];
    return this.#declared(e.text).flatMap((d) => {
      if (!ts.isBindingElement(d) || d.dotDotDotToken || !ts.isArrayBindingPattern(d.parent)) return [];
      const at = d.parent.elements.indexOf(d);
      return this.#destructured(d.parent).map((v) => v.slice(at));
    });
  }

  /** The argument vectors an array destructuring (`const [file, ...args] = …`) takes apart. */
  #destructured(pattern: ts.ArrayBindingPattern): Argv[] {
    const declaration = pattern.parent;
    return ts.isVariableDeclaration(declaration) && declaration.initializer ? this.argvs(declaration.initializer) : [];
  }

  #declared(name: string): ts.Node[] {
    return this.#declarations.get(name) ?? [];
  }

  /** Runs `f` unless the resolution is already this deep (a name defined through itself), else `fallback`. */
  #guard<T>(f: () => T, fallback: T): T {
    if (this.#depth > 16) return fallback;
    this.#depth++;
    try {
      return f();
    } finally {
      this.#depth--;
    }
  }
}

/** `node` as a function with the name callers use: a declaration, a method, or a function assigned to a const. */
function namedFunction(node: ts.Node): { name: string; fn: FunctionLike } | undefined {
  if ((ts.isFunctionDeclaration(node) || ts.isMethodDeclaration(node)) && node.name && ts.isIdentifier(node.name) && node.body) {
    return { name: node.name.text, fn: node };
  }
  if (!ts.isVariableDeclaration(node) || !ts.isIdentifier(node.name) || !node.initializer) return undefined;
  const init = unwrap(node.initializer);
  return ts.isArrowFunction(init) || ts.isFunctionExpression(init) ? { name: node.name.text, fn: init } : undefined;
}

/**
 * `x.run(…)`: a runner handed in (`o.run(argv)`) spawns, but so many objects have a `run` (informers,
 * controllers, loops) that a function passing its parameter to one is not taken for a spawner.
 */
function isMethodRun(call: ts.CallExpression): boolean {
  const callee = unwrap(call.expression);
  return ts.isPropertyAccessExpression(callee) && callee.name.text === 'run';
}

/** `promisify(…)`. */
function isPromisify(call: ts.CallExpression): boolean {
  return ts.isIdentifier(call.expression) && call.expression.text === 'promisify';
}

/** The name a call is known by: `f(…)`, `x.f(…)`, `this.#f(…)` → f; `promisify(f)(…)` and `promisify(f)` → f. */
function calleeName(call: ts.CallExpression): string | undefined {
  const callee = unwrap(call.expression);
  if (ts.isIdentifier(callee)) {
    const promisified = isPromisify(call) ? call.arguments[0] : undefined;
    return promisified ? (ts.isIdentifier(promisified) ? promisified.text : undefined) : callee.text;
  }
  if (ts.isPropertyAccessExpression(callee)) return callee.name.text.replace(/^#/, '');
  return ts.isCallExpression(callee) && isPromisify(callee) ? calleeName(callee) : undefined;
}

function unwrap(e: ts.Node): ts.Node {
  while (ts.isParenthesizedExpression(e) || ts.isNonNullExpression(e) || ts.isAsExpression(e) || ts.isSatisfiesExpression(e)) {
    e = e.expression;
  }
  return e;
}

function isFallback(kind: ts.SyntaxKind): boolean {
  return kind === ts.SyntaxKind.QuestionQuestionToken || kind === ts.SyntaxKind.BarBarToken;
}

function propertyName(name: ts.PropertyName): string | undefined {
  return ts.isIdentifier(name) || ts.isStringLiteral(name) || ts.isNumericLiteral(name) ? name.text : undefined;
}
