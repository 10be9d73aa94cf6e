/*
 * Admission (admission.c): the engine's limits on tasks and bytes in
 * flight, reserved at submit and given back as tasks end.
 */
#ifndef OTE_CORE_ADMISSION_H
#define OTE_CORE_ADMISSION_H

#include "xfer_def.h"

/*
 * Reserve room for tasks and bytes in flight, or BUSY with nothing taken
 * (waiting up to OTE_SUBMIT_TIMEOUT_MS for room); release gives it back.
 */
ote_status_t ote_admission_reserve(ote_engine_h e, size_t tasks, size_t bytes);
void         ote_admission_release(ote_engine_h e, size_t tasks, size_t bytes);

#endif
