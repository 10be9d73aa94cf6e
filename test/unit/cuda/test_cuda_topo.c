/*
 * GPU memory placed by the PCI address CUDA gives each device
 * (cudaDeviceGetPCIBusId, here from the CUDA test double), on a fixture
 * machine (OTE_HWLOC_XML) whose NIC mlx5_0 shares a PCIe root port with the
 * GPU 03:00.0 and is across the sockets from the GPU 84:00.0; mlx5_0:1
 * comes from a sysfs fixture tree (OTE_SYSFS_ROOT).
 */
#include "core/engine_int.h"
#include "cuda_test.h"
#include "testlib.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

void ote_engine_print_transports(ote_engine_h e, FILE *f);

static ote_engine_h engine(void)
{
    setenv("OTE_HWLOC_XML", OTE_TOPO_DIR "/32em64t-2n8c2t-pci-mlx5socket0.xml", 1);
    setenv("OTE_SYSFS_ROOT", OTE_SYSFS_DIR "/multi", 1);
    setenv("OTE_AUTH_KEY", "test-cuda-topo-shared-key", 1);
    setenv("OTE_LOG_LEVEL", "warn", 1);
    setenv("ORBITTE_CUDA_DOUBLE_PCI", "0000:84:00.0,0000:03:00.0", 1);
    cuda_test_use_double(2);
    return ote_test_engine("127.0.0.1:0");
}

static float score(ote_engine_h e, const char *place, const char *nic)
{
    int p = ote_topo_table_place(e->facts.topo_table, place);
    int k = ote_topo_table_nic(e->facts.topo_table, nic);

    assert_true(p >= 0);
    assert_true(k >= 0);
    return e->facts.topo_table->score[p][k];
}

static void test_gpus_by_pci_address(void **state)
{
    ote_engine_h e = engine();
    char *text     = NULL;
    size_t size    = 0;
    FILE *f;
    (void)state;

#ifndef HAVE_HWLOC
    ote_engine_destroy(e);
    skip();
#endif
    assert_non_null(e->facts.topo_table);
    assert_string_equal(e->facts.topo_table->where[ote_topo_table_place(e->facts.topo_table, "cuda:0")],
                        "pci:0000:84:00.0");
    assert_string_equal(e->facts.topo_table->where[ote_topo_table_place(e->facts.topo_table, "cuda:1")],
                        "pci:0000:03:00.0");
    /* cuda:1 shares mlx5_0's root port; cuda:0 is across the sockets from it. */
    assert_true(score(e, "cuda:1", "mlx5_0:1") == 1.0f);
    assert_true(score(e, "cuda:0", "mlx5_0:1") == 0.0625f);
    f = open_memstream(&text, &size);
    assert_non_null(f);
    ote_engine_print_transports(e, f);
    fclose(f);
    assert_non_null(strstr(text, "#   memory cuda:1 (GPU at PCI 0000:03:00.0)\n"
                                 "#     mlx5_0:1     score 1.000 weight 1.00 (same PCIe switch)\n"));
    free(text);
    ote_engine_destroy(e);
}

/*
 * CUDA's ordinals follow CUDA_VISIBLE_DEVICES: cuda:0 is then the GPU at
 * 03:00.0. CUDA is loaded once per process: this runs in a child, before
 * the parent loads it.
 */
static void test_visible_devices(void **state)
{
    int status = -1;
    pid_t pid;
    (void)state;

#ifndef HAVE_HWLOC
    skip();
#endif
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        ote_engine_h e;
        bool ok;

        setenv("CUDA_VISIBLE_DEVICES", "1", 1);
        e  = engine();
        ok = e->facts.topo_table != NULL &&
             ote_topo_table_place(e->facts.topo_table, "cuda:1") == -1 &&
             ote_topo_table_place(e->facts.topo_table, "cuda:0") >= 0 &&
             ote_topo_table_nic(e->facts.topo_table, "mlx5_0:1") >= 0 &&
             e->facts.topo_table->score[ote_topo_table_place(e->facts.topo_table, "cuda:0")]
                                 [ote_topo_table_nic(e->facts.topo_table, "mlx5_0:1")] == 1.0f;
        ote_engine_destroy(e);
        _exit(ok ? 0 : 1);
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_visible_devices),
        cmocka_unit_test(test_gpus_by_pci_address),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
