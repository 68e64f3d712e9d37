#include "pickle.h"

#include <stdlib.h>
#include <string.h>

#include "../kernels/err.h"

/* Bounds that no state dict comes near and that keep a hostile pickle's memory small. */
enum { BLOCK = 4096, MAX_VALUES = 1 << 22, MAX_MEMO = 1 << 22, MAX_BIGINT = 64 };

struct pk_arena {
    pk_value **blocks;
    size_t n_blocks, cap_blocks, n_values;
};

typedef struct {
    pk_arena *a;
    const uint8_t *buf;
    size_t len, pos;
    const char *const *allowed;
    pk_value **stack;
    size_t sp, cap_stack;
    size_t *marks;
    size_t n_marks, cap_marks;
    pk_value **memo;
    size_t cap_memo, n_memo;
} vm;

static pk_value *new_value(vm *m, pk_kind kind)
{
    pk_arena *a = m->a;
    if (a->n_values >= MAX_VALUES) {
        err_set("more than %d values (not a state dict)", MAX_VALUES);
        return NULL;
    }
    if (a->n_values % BLOCK == 0) {
        if (err_grow(&a->blocks, &a->cap_blocks, a->n_blocks + 1, sizeof *a->blocks,
                     "the pickle's values"))
            return NULL;
        if (!(a->blocks[a->n_blocks] = err_calloc(BLOCK, sizeof(pk_value), "the pickle's values")))
            return NULL;
        a->n_blocks++;
    }
    pk_value *v = &a->blocks[a->n_values / BLOCK][a->n_values % BLOCK];
    a->n_values++;
    v->kind = kind;
    return v;
}

void pk_free(pk_arena *a)
{
    if (!a)
        return;
    for (size_t i = 0; i < a->n_values; i++) {
        pk_value *v = &a->blocks[i / BLOCK][i % BLOCK];
        free(v->items);
        if (v->kind == PK_GLOBAL)
            free((char *)v->s);
    }
    for (size_t i = 0; i < a->n_blocks; i++)
        free(a->blocks[i]);
    free(a->blocks);
    free(a);
}

static int add_item(pk_value *c, pk_value *item)
{
    if (err_grow(&c->items, &c->cap, c->n + 1, sizeof *c->items, "a pickled container"))
        return -1;
    c->items[c->n++] = item;
    return 0;
}

static int push(vm *m, pk_value *v)
{
    if (!v || err_grow(&m->stack, &m->cap_stack, m->sp + 1, sizeof *m->stack, "the pickle stack"))
        return -1;
    m->stack[m->sp++] = v;
    return 0;
}

/* Where the values since the last MARK begin: nothing below it may be taken. */
static size_t floor_of(const vm *m) { return m->n_marks ? m->marks[m->n_marks - 1] : 0; }

static int need(const vm *m, size_t n)
{
    return m->sp - floor_of(m) < n ? err_set("pickle stack underflow at byte %zu", m->pos) : 0;
}

static pk_value *pop(vm *m) { return need(m, 1) ? NULL : m->stack[--m->sp]; }
static pk_value *top(vm *m) { return need(m, 1) ? NULL : m->stack[m->sp - 1]; }

/* The items pushed since the last MARK, which is popped: *first indexes them on the stack. */
static int pop_mark(vm *m, size_t *first)
{
    if (!m->n_marks)
        return err_set("pickle opcode at byte %zu needs a MARK that is not there", m->pos);
    *first = m->marks[--m->n_marks];
    return 0;
}

static const uint8_t *take(vm *m, size_t n)
{
    if (n > m->len - m->pos) {
        err_set("pickle ends inside an opcode's argument at byte %zu (truncated?)", m->pos);
        return NULL;
    }
    const uint8_t *p = m->buf + m->pos;
    m->pos += n;
    return p;
}

static int take_uint(vm *m, int bytes, uint64_t *out)
{
    const uint8_t *p = take(m, (size_t)bytes);
    if (!p)
        return -1;
    *out = 0;
    for (int i = bytes - 1; i >= 0; i--)
        *out = *out << 8 | p[i];
    return 0;
}

static int push_int(vm *m, int64_t i)
{
    pk_value *v = new_value(m, PK_INT);
    if (v)
        v->i = i;
    return push(m, v);
}

static int push_text(vm *m, pk_kind kind, uint64_t n)
{
    if (n > m->len - m->pos)
        return err_set("pickle string of %llu bytes runs past the end at byte %zu",
                       (unsigned long long)n, m->pos);
    pk_value *v = new_value(m, kind);
    if (!v)
        return -1;
    v->s = (const char *)take(m, (size_t)n);
    v->len = (size_t)n;
    return push(m, v);
}

/* LONG1/LONG4: little-endian two's complement; an int when it fits in 64 bits, else kept as bytes.
 */
static int push_long(vm *m, uint64_t n)
{
    if (n > MAX_BIGINT)
        return err_set("pickled integer of %llu bytes at byte %zu (absurd)", (unsigned long long)n,
                       m->pos);
    const uint8_t *p = take(m, (size_t)n);
    if (!p)
        return -1;
    if (n > 8) {
        pk_value *v = new_value(m, PK_BIGINT);
        if (v)
            v->s = (const char *)p, v->len = (size_t)n;
        return push(m, v);
    }
    uint64_t u = 0;
    for (int i = (int)n - 1; i >= 0; i--)
        u = u << 8 | p[i];
    if (n && n < 8 && (p[n - 1] & 0x80))
        u |= ~0ull << (8 * n);
    return push_int(m, (int64_t)u);
}

static int push_global(vm *m, const char *mod, size_t mlen, const char *name, size_t nlen)
{
    for (const char *const *g = m->allowed; *g; g++)
        if (strlen(*g) == mlen + 1 + nlen && !memcmp(*g, mod, mlen) && (*g)[mlen] == '.' &&
            !memcmp(*g + mlen + 1, name, nlen)) {
            pk_value *v = new_value(m, PK_GLOBAL);
            char *s = v ? err_malloc(mlen + nlen + 2, "a pickled global's name") : NULL;
            if (!s)
                return -1;
            memcpy(s, *g, mlen + nlen + 2);
            v->s = s, v->len = mlen + 1 + nlen;
            return push(m, v);
        }
    /* the name is the checkpoint's bytes: print it safely and briefly */
    char shown[96];
    size_t k = 0;
    for (size_t i = 0; i < mlen + 1 + nlen && k < sizeof shown - 4; i++) {
        char c = i < mlen ? mod[i] : i == mlen ? '.' : name[i - mlen - 1];
        shown[k++] = c >= 0x20 && c < 0x7f ? c : '?';
    }
    shown[k] = 0;
    return err_set("refusing global '%s': a checkpoint may only name tensors, storages and "
                   "OrderedDict (nothing "
                   "was run)",
                   shown);
}

/* GLOBAL's argument: "module\nname\n" */
static int op_global(vm *m)
{
    const uint8_t *s = m->buf + m->pos, *end = m->buf + m->len;
    const uint8_t *nl1 = memchr(s, '\n', (size_t)(end - s));
    const uint8_t *nl2 = nl1 ? memchr(nl1 + 1, '\n', (size_t)(end - nl1 - 1)) : NULL;
    if (!nl2 || nl1 - s > 200 || nl2 - nl1 > 200)
        return err_set("pickle GLOBAL at byte %zu has no module and name lines", m->pos);
    m->pos = (size_t)(nl2 + 1 - m->buf);
    return push_global(m, (const char *)s, (size_t)(nl1 - s), (const char *)nl1 + 1,
                       (size_t)(nl2 - nl1 - 1));
}

static int op_stack_global(vm *m)
{
    pk_value *name = pop(m), *mod = name ? pop(m) : NULL;
    if (!mod)
        return -1;
    if (mod->kind != PK_STR || name->kind != PK_STR || mod->len > 200 || name->len > 200)
        return err_set("pickle STACK_GLOBAL at byte %zu needs two strings", m->pos);
    return push_global(m, mod->s, mod->len, name->s, name->len);
}

static int memo_put(vm *m, uint64_t idx)
{
    pk_value *v = top(m);
    if (!v)
        return -1;
    if (idx >= MAX_MEMO)
        return err_set("pickle memo index %llu at byte %zu is absurd", (unsigned long long)idx,
                       m->pos);
    size_t old = m->cap_memo;
    if (err_grow(&m->memo, &m->cap_memo, (size_t)idx + 1, sizeof *m->memo, "the pickle memo"))
        return -1;
    memset(m->memo + old, 0, (m->cap_memo - old) * sizeof *m->memo);
    m->n_memo += !m->memo[idx];
    m->memo[idx] = v;
    return 0;
}

static int memo_get(vm *m, uint64_t idx)
{
    if (idx >= m->cap_memo || !m->memo[idx])
        return err_set("pickle refers to memo entry %llu at byte %zu, never stored",
                       (unsigned long long)idx, m->pos);
    return push(m, m->memo[idx]);
}

static int make_tuple(vm *m, size_t first)
{
    pk_value *t = new_value(m, PK_TUPLE);
    if (!t)
        return -1;
    for (size_t i = first; i < m->sp; i++)
        if (add_item(t, m->stack[i]))
            return -1;
    m->sp = first;
    return push(m, t);
}

static int tuple_n(vm *m, size_t n) { return need(m, n) ? -1 : make_tuple(m, m->sp - n); }

/* Pairs are kept in order, a repeated key too (a lookup takes the last, as Python's dict would):
 * replacing in place would cost a hostile pickle's million keys a quadratic search. */
static int dict_set(pk_value *d, pk_value *k, pk_value *v)
{
    if (err_grow(&d->items, &d->cap, 2 * d->n + 2, sizeof *d->items, "a pickled dict"))
        return -1;
    d->items[2 * d->n] = k;
    d->items[2 * d->n + 1] = v;
    d->n++;
    return 0;
}

/* SETITEM(S), APPEND(S): the target sits just below the items (below the MARK for the plural
 * forms). */
static int fill(vm *m, size_t first, int pairs)
{
    if (first <= floor_of(m) || (m->sp - first) % (pairs ? 2 : 1))
        return err_set("pickle stack underflow at byte %zu", m->pos);
    pk_value *c = m->stack[first - 1];
    if (c->kind != (pairs ? PK_DICT : PK_LIST))
        return err_set("pickle adds items to a %s at byte %zu", pk_kind_name(c->kind), m->pos);
    for (size_t i = first; i < m->sp; i += pairs ? 2 : 1)
        if (pairs ? dict_set(c, m->stack[i], m->stack[i + 1]) : add_item(c, m->stack[i]))
            return -1;
    m->sp = first;
    return 0;
}

static int op_reduce(vm *m)
{
    pk_value *args = pop(m), *fn = args ? pop(m) : NULL;
    if (!fn)
        return -1;
    if (fn->kind != PK_GLOBAL || args->kind != PK_TUPLE)
        return err_set("pickle REDUCE at byte %zu calls a %s with a %s", m->pos,
                       pk_kind_name(fn->kind), pk_kind_name(args->kind));
    if (!strcmp(fn->s, "collections.OrderedDict")) {
        if (args->n)
            return err_set("pickle builds an OrderedDict from arguments at byte %zu", m->pos);
        return push(m, new_value(m, PK_DICT));
    }
    pk_value *c = new_value(m, PK_CALL);
    if (!c || add_item(c, fn) || add_item(c, args))
        return -1;
    return push(m, c);
}

static int step(vm *m, int *stop)
{
    uint8_t op = m->buf[m->pos++];
    uint64_t u;
    size_t first = 0;
    pk_value *v;
    switch (op) {
        case 0x80: /* PROTO */
            if (take_uint(m, 1, &u))
                return -1;
            return u > 5 ? err_set("pickle protocol %llu is newer than any known",
                                   (unsigned long long)u)
                         : 0;
        case 0x95: /* FRAME: a size hint */ return take_uint(m, 8, &u);
        case '.': *stop = 1; return 0;
        case '(':
            if (err_grow(&m->marks, &m->cap_marks, m->n_marks + 1, sizeof *m->marks,
                         "the pickle's marks"))
                return -1;
            m->marks[m->n_marks++] = m->sp;
            return 0;
        case '0': return pop(m) ? 0 : -1;
        case '1': return pop_mark(m, &first) ? -1 : (m->sp = first, 0);
        case '2': return (v = top(m)) ? push(m, v) : -1;
        case 'N': return push(m, new_value(m, PK_NONE));
        case 0x88:
        case 0x89:
            if (!(v = new_value(m, PK_BOOL)))
                return -1;
            v->i = op == 0x88;
            return push(m, v);
        case 'J': return take_uint(m, 4, &u) ? -1 : push_int(m, (int32_t)(uint32_t)u);
        case 'K': return take_uint(m, 1, &u) ? -1 : push_int(m, (int64_t)u);
        case 'M': return take_uint(m, 2, &u) ? -1 : push_int(m, (int64_t)u);
        case 0x8a: return take_uint(m, 1, &u) ? -1 : push_long(m, u);
        case 0x8b: return take_uint(m, 4, &u) ? -1 : push_long(m, u);
        case 'G': {
            if (take_uint(m, 8, &u)) /* big-endian on the wire: take_uint read it little-endian */
                return -1;
            uint64_t be = __builtin_bswap64(u);
            if (!(v = new_value(m, PK_FLOAT)))
                return -1;
            memcpy(&v->f, &be, sizeof v->f);
            return push(m, v);
        }
        case 'X': return take_uint(m, 4, &u) ? -1 : push_text(m, PK_STR, u);
        case 0x8c: return take_uint(m, 1, &u) ? -1 : push_text(m, PK_STR, u);
        case 0x8d: return take_uint(m, 8, &u) ? -1 : push_text(m, PK_STR, u);
        case 'T': return take_uint(m, 4, &u) ? -1 : push_text(m, PK_STR, u);
        case 'U': return take_uint(m, 1, &u) ? -1 : push_text(m, PK_STR, u);
        case 'B': return take_uint(m, 4, &u) ? -1 : push_text(m, PK_BYTES, u);
        case 'C': return take_uint(m, 1, &u) ? -1 : push_text(m, PK_BYTES, u);
        case ')': return push(m, new_value(m, PK_TUPLE));
        case 't': return pop_mark(m, &first) ? -1 : make_tuple(m, first);
        case 0x85:
        case 0x86:
        case 0x87: return tuple_n(m, (size_t)(op - 0x84));
        case ']': return push(m, new_value(m, PK_LIST));
        case '}': return push(m, new_value(m, PK_DICT));
        case 'l':
        case 'd':
            if (pop_mark(m, &first) || !(v = new_value(m, op == 'l' ? PK_LIST : PK_DICT)) ||
                push(m, v))
                return -1;
            /* the new container sits where the items began: move it below them */
            memmove(m->stack + first + 1, m->stack + first, (m->sp - 1 - first) * sizeof *m->stack);
            m->stack[first] = v;
            return fill(m, first + 1, op == 'd');
        case 'a': return need(m, 2) ? -1 : fill(m, m->sp - 1, 0);
        case 's': return need(m, 3) ? -1 : fill(m, m->sp - 2, 1);
        case 'e':
        case 'u': return pop_mark(m, &first) ? -1 : fill(m, first, op == 'u');
        case 'c': return op_global(m);
        case 0x93: return op_stack_global(m);
        case 'R': return op_reduce(m);
        case 'b': { /* BUILD: an OrderedDict's attributes (a state dict's _metadata) are not needed
                     */
            pk_value *state = pop(m), *target = state ? top(m) : NULL;
            if (!target)
                return -1;
            return target->kind == PK_DICT
                       ? 0
                       : err_set("pickle BUILD at byte %zu sets the state of a %s", m->pos,
                                 pk_kind_name(target->kind));
        }
        case 'q': return take_uint(m, 1, &u) ? -1 : memo_put(m, u);
        case 'r': return take_uint(m, 4, &u) ? -1 : memo_put(m, u);
        case 0x94: return memo_put(m, m->n_memo);
        case 'h': return take_uint(m, 1, &u) ? -1 : memo_get(m, u);
        case 'j': return take_uint(m, 4, &u) ? -1 : memo_get(m, u);
        case 'Q': {
            pk_value *id = pop(m), *p = id ? new_value(m, PK_PID) : NULL;
            if (!p || add_item(p, id))
                return -1;
            return push(m, p);
        }
        default:
            return err_set("pickle opcode 0x%02x at byte %zu is not one a state dict uses", op,
                           m->pos - 1);
    }
}

int pk_load(pk_arena **a, const uint8_t *buf, size_t len, size_t *used, const char *const *allowed,
            const pk_value **root)
{
    vm m = {.buf = buf, .len = len, .allowed = allowed};
    *a = NULL;
    if (!(m.a = err_calloc(1, sizeof *m.a, "the pickle's values")))
        return -1;
    int stop = 0, rc = 0;
    while (!stop && !rc) {
        if (m.pos >= m.len) {
            rc = err_set("pickle ends at byte %zu without STOP (truncated?)", m.pos);
            break;
        }
        rc = step(&m, &stop);
    }
    if (!rc && (m.sp != 1 || m.n_marks))
        rc = err_set("pickle stops with %zu values and %zu marks left, not one value", m.sp,
                     m.n_marks);
    if (!rc) {
        *root = m.stack[0];
        *used = m.pos;
        *a = m.a;
    } else {
        pk_free(m.a);
    }
    free(m.stack);
    free(m.marks);
    free(m.memo);
    return rc;
}

const pk_value *pk_dict_get(const pk_value *dict, const char *key)
{
    if (!dict || dict->kind != PK_DICT)
        return NULL;
    for (size_t i = dict->n; i-- > 0;)
        if (pk_str_is(dict->items[2 * i], key))
            return dict->items[2 * i + 1];
    return NULL;
}

int pk_str_is(const pk_value *v, const char *s)
{
    return v && v->kind == PK_STR && v->len == strlen(s) && !memcmp(v->s, s, v->len);
}

const char *pk_kind_name(pk_kind k)
{
    static const char *const names[] = {"None",   "bool",  "int",          "big int", "float",
                                        "str",    "bytes", "tuple",        "list",    "dict",
                                        "global", "call",  "persistent id"};
    return names[k];
}
