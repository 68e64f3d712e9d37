/* The drafter's options (draft.h): apart from the drafter, so that what reads a session's settings
 * needs no model. */
#include <string.h>
#include <sys/stat.h>

#include "../kernels/err.h"
#include "draft.h"

void draft_opts_default(draft_opts *o)
{
    *o = (draft_opts){.kind = DRAFT_NONE, .max = 4, .min_prob = 0.5f};
}

/* look: a checkpoint's folder must exist (a name typed now) or not (a name a session recorded: the
 * folder is looked for when the drafter loads, and may have moved) */
static int parse(const char *spec, draft_opts *o, int look)
{
    if (!spec || !*spec)
        return err_set("--draft: expected lookup, self-q8, off or a checkpoint directory");
    o->dir = NULL;
    if (!strcmp(spec, "off"))
        o->kind = DRAFT_NONE;
    else if (!strcmp(spec, "lookup"))
        o->kind = DRAFT_LOOKUP;
    else if (!strcmp(spec, "self-q8"))
        o->kind = DRAFT_SELF_Q8;
    else {
        struct stat sb;
        if (look && (stat(spec, &sb) || !S_ISDIR(sb.st_mode))) /* a typo of a name, most likely */
            return err_set("--draft %s: expected lookup, self-q8, off or a GPT-2 checkpoint "
                           "directory, and there is no directory %s",
                           spec, spec);
        o->kind = DRAFT_MODEL;
        o->dir = spec;
    }
    return 0;
}

int draft_parse(const char *spec, draft_opts *o) { return parse(spec, o, 1); }

int draft_parse_recorded(const char *spec, draft_opts *o) { return parse(spec, o, 0); }

const char *draft_name(const draft_opts *o)
{
    switch (o->kind) {
        case DRAFT_LOOKUP: return "lookup";
        case DRAFT_SELF_Q8: return "self-q8";
        case DRAFT_MODEL: return o->dir;
        default: return "off";
    }
}
