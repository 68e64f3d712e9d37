/* bench --policy --control: the same track on a model of random weights of the model's shape,
 * then the two side by side, one table per window (or budget): what the bench reports when
 * nothing is read, beside what it reports for the model. */
#ifndef KVCHAT_POLICY_CONTROL_H
#define KVCHAT_POLICY_CONTROL_H

#include "../chat/runtime.h"

/* a track as bench's options give it: one of messages, chats, recall, text (none: the built-in
 * chat) */
typedef struct {
    const char *messages, *chats, *recall, *text, *gate_text, *gate_recall;
    int docs;
} policy_track;

/* the track on lm alone (json: its figures, or NULL) */
int policy_track_run(loaded_model *lm, const model_opts *mo, const policy_track *t,
                     const char *json);
/* the track on lm and on the control, then side by side; json holds {"model", "control"} */
int policy_with_control(loaded_model *lm, const model_opts *mo, const policy_track *t,
                        const char *json);

#endif
