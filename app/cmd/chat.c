/* kvchat chat: the full-screen chat, or --no-tui line mode (one user message per line on stdin,
 * each reply on one line of stdout). Both save the session as it happens and can resume one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../kernels/err.h"
#include "../../model/events.h"
#include "../../ui/chat_pane.h"
#include "../actions.h"
#include "../session/persist.h"
#include "commands.h"
#include "../chat/engine.h"
#include "../events_log.h"
#include "../files.h"
#include "../session/fingerprint.h"
#include "../options.h"
#include "../safe_text.h"
#include "../session/session.h"
#include "../session/snapshot.h"
#include "../tui.h"
#include "chat.h"
#include "chat_options.h"
#include "../chat/records.h"
#include "../session/restore.h"
#include "sessions.h"
#include "../selftest.h"

static void progress(void *ctx, int done, int total)
{
    int id = *(int *)ctx;
    if (isatty(STDERR_FILENO) || done == total)
        fprintf(stderr, "\rre-prefilling conversation %d: %d / %d tokens%s", id, done, total,
                done == total ? "\n" : "");
}

/* Each conversation's last turn_end, restored into the engine; the cache loaded from the snapshot
 * when it matches, else re-prefilled. */
static void keep_event(void *ctx, json_t *ev) { json_array_append((json_t *)ctx, ev); }

static int restore(engine *e, const loaded_model *lm, const session *s, const char *kv_path,
                   const char *fp, int force)
{
    int *order, n;
    int rc = session_restore(e, s, s->n_events, &order, &n), loaded = 0;
    if (!rc && !force && !access(kv_path, F_OK)) {
        loaded = !snapshot_load(kv_path, e, lm, fp);
        if (!loaded)
            fprintf(stderr, "kvchat: KV snapshot not used (%s); re-prefilling the history\n",
                    err_msg());
    }
    /* the drafters' caches: kept apart, and never worth failing a resume for */
    if (!rc && !force && snapshot_load_drafts(kv_path, e, lm, fp) < 0)
        fprintf(stderr,
                "kvchat: draft KV snapshot not used (%s); the drafter re-prefills at its "
                "first pass\n",
                err_msg());
    int *prefilled = calloc((size_t)n + 1, sizeof *prefilled), n_prefilled = 0;
    int *drafts = calloc((size_t)n + 1, sizeof *drafts), n_drafts = 0;
    if (!rc && (!prefilled || !drafts))
        rc = err_set("out of memory for a resume");
    for (int k = 0; k < n && !rc; k++) {
        int id = order[k];
        drafter *d = engine_drafter(e, id);
        if (d && draft_seq(d) && kv_len(draft_seq(d)) > 0)
            drafts[n_drafts++] = id;
        if (loaded && kv_len(engine_conv_cache(e, id)) == engine_window_len(e, id))
            continue;
        prefilled[n_prefilled++] = id;
        rc = engine_prefill_window(e, id, progress, &order[k]);
    }
    /* what replay --verify rebuilds to go on as this run does: the bits of a window prefilled in
     * one pass are not those of the turns' passes that made it */
    if (!rc)
        ev_emit_restored(lm->bus, 0,
                         &(ev_restored){.prefilled = prefilled,
                                        .n_prefilled = n_prefilled,
                                        .has_prefilled = 1,
                                        .drafts = drafts,
                                        .n_drafts = n_drafts,
                                        .has_drafts = 1});
    free(prefilled);
    free(drafts);
    free(order);
    return rc;
}

int cmd_chat(int argc, char **argv)
{
    model_opts mo;
    model_opts_init(&mo);
    chat_args a = {.eo = {.tpl = TPL_GPT2,
                          .keep = -1,
                          .evict = EVICT_EXACT,
                          .evict_at = WIN_AT_TURN,
                          .prepare = 1,
                          .attention = -1}};
    draft_opts_default(&a.eo.draft);
    for (int i = 1; i < argc; i++) {
        int r = chat_opt(&a, argc, argv, &i);
        if (r == 0)
            r = model_opts_parse(&mo, argc, argv, &i);
        if (r < 0)
            return EXIT_USAGE;
        if (r == 0)
            return err_set("unknown option '%s' (see kvchat chat --help)", argv[i]), EXIT_USAGE;
    }
    if (a.commands) {
        act_markdown(stdout);
        return 0;
    }
    session hist = {0};
    model_opts rec;
    engine_opts rec_eo;
    sampler_params want_sp = mo.sp;
    int want_n = mo.n_predict;
    char kv_path[4200] = "", save_kv[4200] = "", fp[17] = "", dir[4096];
    int append = 0, overwrite = 0;
    if (a.session && (a.resume ? !same_file(a.session, a.resume) : 1) && file_size(a.session) > 0) {
        /* an existing file is never replaced without --force: a session in it is continued instead
         */
        char why[512] = "";
        int turns = 0, read = !a.resume && !session_read(&hist, a.session);
        for (int i = 0; read && i < hist.n_events; i++)
            turns += ev_kind_of(hist.events[i]) == EVK_TURN_END;
        if (read && !turns)
            session_free(&hist);
        if (turns) {
            a.resume = a.session;
            fprintf(stderr, "kvchat: %s holds a session: continuing it (as --resume does)\n",
                    a.session);
        } else if (a.force) {
            overwrite = 1;
        } else {
            if (!a.resume)
                snprintf(why, sizeof why, " (%s)",
                         read ? "a session with no completed turn" : err_msg());
            return err_set("--session %s already exists%s; choose another file, or --force to "
                           "overwrite it",
                           a.session, why),
                   EXIT_RUNTIME;
        }
    }
    if (a.resume) {
        append = !a.session || same_file(a.session, a.resume);
        if (!hist.header && session_read(&hist, a.resume))
            return EXIT_RUNTIME;
        if (hist.truncated && !append)
            fprintf(stderr,
                    "kvchat: %s ends in a cut line (a crash mid-turn); resuming from the last "
                    "complete turn\n",
                    a.resume);
        const char *recorded =
            json_string_value(json_object_get(json_object_get(hist.header, "model"), "dir"));
        if (!mo.model_dir && !getenv("KVCHAT_MODEL") && recorded)
            mo.model_dir = recorded;
        if (session_settings_at(&hist, hist.n_events, &mo, &a.eo)) {
            session_free(&hist);
            return err_wrap("%s", a.resume), EXIT_RUNTIME;
        }
        rec = mo;
        rec_eo = a.eo;
        /* options given on this command line still win over the recorded ones */
        for (int i = 1; i < argc; i++)
            if (!chat_opt(&a, argc, argv, &i))
                model_opts_parse(&mo, argc, argv, &i);
        char names[256];
        if (session_settings_diff(&rec, &rec_eo, &mo, &a.eo, names, sizeof names))
            fprintf(stderr,
                    "kvchat: %s continues with %s from the command line instead of the recorded "
                    "settings (recorded from here on)\n",
                    a.resume, names);
        if (mo.kv.window != rec.kv.window && mo.kv.pool_bytes == rec.kv.pool_bytes)
            mo.kv.pool_bytes = 0; /* sized for the new window, as when no size is given */
        /* the conversations continue with the recorded sampling; a change is a set event (below) */
        want_sp = mo.sp;
        want_n = mo.n_predict;
        mo.sp = rec.sp;
        mo.n_predict = rec.n_predict;
        snprintf(kv_path, sizeof kv_path, "%s.kv", a.resume);
    }
    /* a verify pass reads for several tokens at once: attention's probe is one step's */
    if (a.eo.draft.kind != DRAFT_NONE && (a.eo.attention > 0 || a.eo.policy == WIN_LEAST_READ)) {
        session_free(&hist);
        return err_set("--draft: not with %s (attention is probed one decode step at a time)",
                       a.eo.policy == WIN_LEAST_READ ? "--evict least-read" : "--attention on"),
               EXIT_USAGE;
    }
    int tui = !a.no_tui && isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
    loaded_model lm;
    if (selftest_load(&lm, &mo)) {
        session_free(&hist);
        return EXIT_RUNTIME;
    }
    if (!a.eo.tpl_why)
        a.eo.tpl = tpl_for_model(&lm.model.cfg, lm.dir, &a.eo.tpl_why);
    events_log log = {0};
    session_writer sw = {0};
    json_t *resumed = NULL;
    engine *e = NULL;
    json_t *header = NULL;
    int rc = EXIT_RUNTIME, conv = -1;
    snprintf(dir, sizeof dir, "%s", lm.dir);
    if (fp_model(lm.dir, fp))
        goto out;
    if (a.resume) {
        const json_t *m = json_object_get(hist.header, "model");
        char tfp[17];
        const char *want = json_string_value(json_object_get(m, "fingerprint")),
                   *wantt = json_string_value(json_object_get(m, "tokenizer"));
        if (fp_tokenizer(lm.dir, tfp))
            goto out;
        if ((!want || strcmp(want, fp) || !wantt || strcmp(wantt, tfp)) && !a.force) {
            err_set("%s was recorded with another model or tokenizer than %s; --force re-prefills "
                    "it with this one",
                    a.resume, lm.dir);
            goto out;
        }
        if (!a.force && session_draft_same(&hist, &a.eo)) {
            err_wrap("%s", a.resume);
            err_suffix(" (--force goes on with this one)");
            goto out;
        }
    }
    const char *save_to = a.session ? a.session : a.resume;
    char default_path[4096];
    if (!save_to && tui && !a.no_save) {
        if (session_default_path(default_path, sizeof default_path))
            goto out;
        save_to = default_path;
    }
    if (a.no_save && !a.session)
        save_to = NULL;
    if (save_to) {
        session_mode mode = append ? SESSION_APPEND : overwrite ? SESSION_OVERWRITE : SESSION_NEW;
        /* resumed into another file: it starts as the resumed session (its complete lines), so it
         * replays, verifies and resumes alone */
        if (a.resume && !append) {
            if (session_write_file(save_to, hist.header, hist.events, hist.n_events))
                goto out;
            mode = SESSION_APPEND;
        }
        if (!(header = session_header(&lm, &mo, &a.eo)) ||
            session_open(&sw, save_to, mode, header, lm.bus))
            goto out;
        snprintf(save_kv, sizeof save_kv, "%s.kv", save_to);
        snapshot_remove_part(save_kv);
    }
    /* after the session: the same file for both is then a session, which --events refuses */
    if (a.events && events_log_open(&log, a.events, a.force, lm.bus))
        goto out;
    /* conversations 1..CHAT_PANES have a pane of their own in the TUI, where a line-mode session
     * replays too; and a bound keeps 200,000 /new from taking minutes to free */
    a.eo.max_convs = CHAT_PANES;
    /* where something shows it, and where it costs under 3% of a decode step: on the CPU (a
     * probed CUDA step is not recorded as a graph, and is unmeasured) */
    if (a.eo.policy == WIN_LEAST_READ && !a.eo.attention) {
        err_set("--evict least-read goes by where the replies read: it needs --attention on");
        goto out;
    }
    if (a.eo.attention < 0 && a.eo.draft.kind != DRAFT_NONE)
        a.eo.attention = 0;
    if (a.eo.attention < 0)
        a.eo.attention =
            (tui || a.events) && !strcmp(lm.backend->name, "cpu") ? ENGINE_ATTENTION_EVERY : 0;
    if (!(e = engine_create(&lm, &mo, &a.eo)))
        goto out;
    if (a.resume) {
        /* what the resume emits, for /save to put after the history (the front end listens from
         * the first message on) */
        if (!(resumed = json_array()) || ev_subscribe(lm.bus, keep_event, resumed))
            goto out;
        /* first: the re-prefill's events belong to this run (the reader takes its window from here)
         */
        session_settings set;
        if (session_settings_of(&set, &lm, &a.eo)) /* sampling stays out: a change of it is a set
                                                     * event, after the restore */
            goto out;
        long long before = session_tell(&sw);
        ev_emit_resume(lm.bus, 0,
                       &(ev_resume){EV_OPT(from, a.resume),
                                    EV_OPT(window, kv_pool_opts(lm.pool)->window),
                                    EV_OPT(vocab_size, lm.model.cfg.vocab_size),
                                    EV_OPT(weights_dtype, set.weights_dtype),
                                    EV_OPT(cache, set.cache), EV_OPT(chat, set.chat)});
        if (restore(e, &lm, &hist, kv_path, fp, a.force)) {
            ev_unsubscribe(lm.bus, keep_event, resumed);
            char why[1024]; /* the failure is the error; its events leave the file */
            snprintf(why, sizeof why, "%s", err_msg());
            if (!session_cut(&sw, before))
                err_set("%s", why);
            goto out;
        }
        if (!sampler_params_equal(&want_sp, &mo.sp) || want_n != mo.n_predict)
            engine_set_sampling(e, &want_sp, want_n);
        ev_unsubscribe(lm.bus, keep_event, resumed);
        conv = engine_conv_id(e, engine_conv_count(e) - 1);
    } /* else the front end makes the first conversation once it listens: /save keeps its event */
    chat_persist persist = {.kv_path = save_to ? save_kv : NULL,
                            .save_cache = a.save_cache,
                            .fingerprint = fp,
                            /* a resumed session's own: its events read by its settings */
                            .header = a.resume ? hist.header : header,
                            .history = a.resume ? &hist : NULL,
                            .resumed = resumed,
                            .session_path = save_to,
                            .unsaved_why =
                                a.no_save ? "--no-save" : "line mode saves with --session FILE"};
    if (tui) {
        rc = tui_run(&lm, e, &a.eo, &persist);
        if (!rc && save_to)
            /* the path alone on its line: the hint after it fits 80 columns whatever its length */
            fprintf(stderr,
                    "kvchat: session saved in %s\n"
                    "kvchat: kvchat replay plays it back, kvchat --resume continues it\n",
                    save_to);
        goto out;
    }
    rc = chat_lines(e, &lm, &a.eo, &persist, conv, &sw);
out:
    engine_free(e);
    if (sw.failed && !rc) {
        err_set("--session %s: writing failed (disk full?)", sw.path);
        rc = EXIT_RUNTIME;
    }
    session_close(&sw, lm.bus);
    json_decref(header);
    json_decref(resumed);
    int log_err = events_log_close(&log);
    if (log_err &&
        !rc) { /* the first error wins the one line; this one is reported when it is the only one */
        err_set("--events %s: writing failed: %s", a.events, strerror(log_err));
        rc = EXIT_RUNTIME;
    }
    unload_model(&lm);
    session_free(&hist);
    return rc;
}
