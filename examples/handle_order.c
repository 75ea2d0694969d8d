/*
 * The fourth article's handleOrder, with weft's structured concurrency:
 * updateInventory and updateOrder run concurrently in a FAIL_FAST scope.
 * If either fails, the other is cancelled (no mismatched inventory and
 * order, no wasted work); if the thread running handleOrder is cancelled,
 * both are; nothing outlives the scope.
 *
 *   handle_order                       both succeed
 *   handle_order --fail inventory      updateInventory fails: updateOrder is cancelled
 *   handle_order --fail order          updateOrder fails: updateInventory is cancelled
 *   handle_order --cancel-owner        handleOrder's own vthread is cancelled mid-join
 *
 * The work is simulated with weft_sleep (the articles' simulated I/O).
 */
#include <weft.h>

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef struct order {
    int id;
    int fail_inventory, fail_order; /* fail after this many ms (0: succeed) */
    int64_t inventory_ms, order_ms; /* how long each takes */
    /* what happened, for the tests */
    atomic_int inventory_done, order_done, inventory_cancelled, order_cancelled;
} order;

static int update_inventory(void *arg, void **result) {
    order *o = arg;
    int64_t ms = o->fail_inventory ? o->fail_inventory : o->inventory_ms;
    int r = weft_sleep(ms * 1000000);
    if (r == -ECANCELED) {
        atomic_store(&o->inventory_cancelled, 1);
        return r;
    }
    if (o->fail_inventory) return -EIO;
    atomic_store(&o->inventory_done, 1);
    *result = (void *)(intptr_t)(o->id * 10); /* "the inventory" */
    return 0;
}

static int update_order(void *arg, void **result) {
    order *o = arg;
    int64_t ms = o->fail_order ? o->fail_order : o->order_ms;
    int r = weft_sleep(ms * 1000000);
    if (r == -ECANCELED) {
        atomic_store(&o->order_cancelled, 1);
        return r;
    }
    if (o->fail_order) return -EPROTO;
    atomic_store(&o->order_done, 1);
    *result = (void *)(intptr_t)(o->id * 100); /* "the order" */
    return 0;
}

/* Returns 0 and prints the composed result, or the first failure. */
static int handle_order(order *o) {
    weft_scope *scope;
    int r = weft_scope_create(&scope, WEFT_SCOPE_FAIL_FAST, 0);
    if (r < 0) return r;
    weft_task *inventory = weft_fork(scope, update_inventory, o);
    weft_task *ord = weft_fork(scope, update_order, o);
    r = weft_scope_join(scope); /* join both forks; the first failure, if any */
    if (r == 0 && inventory && ord)
        printf("Inventory %ld updated for order %ld\n", (long)(intptr_t)weft_task_result(inventory),
               (long)(intptr_t)weft_task_result(ord));
    weft_scope_close(scope); /* nothing outlives the scope */
    return r;
}

#ifndef HANDLE_ORDER_NO_MAIN
static order the_order = {.id = 7, .inventory_ms = 200, .order_ms = 100};

static void *handler(void *arg) { return (void *)(intptr_t)handle_order(&the_order); }

int main(int argc, char **argv) {
    int cancel_owner = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--fail") && i + 1 < argc) {
            i++;
            if (!strcmp(argv[i], "inventory")) the_order.fail_inventory = 50;
            else if (!strcmp(argv[i], "order")) the_order.fail_order = 50;
            else goto usage;
        } else if (!strcmp(argv[i], "--cancel-owner")) {
            cancel_owner = 1;
        } else {
            goto usage;
        }
    }
    weft_thread *h;
    if (weft_spawn(&h, handler, NULL, NULL) < 0) return 1;
    if (cancel_owner) {
        weft_sleep(50 * 1000000);
        weft_cancel(h);
    }
    void *res;
    weft_join(h, &res);
    int r = (int)(intptr_t)res;
    printf("handleOrder: %s; inventory %s, order %s\n", r ? strerror(-r) : "ok",
           the_order.inventory_done ? "updated" : the_order.inventory_cancelled ? "cancelled" : "failed",
           the_order.order_done ? "updated" : the_order.order_cancelled ? "cancelled" : "failed");
    weft_shutdown();
    return r ? 1 : 0;
usage:
    fprintf(stderr, "usage: handle_order [--fail inventory|order] [--cancel-owner]\n");
    return 2;
}
#endif
