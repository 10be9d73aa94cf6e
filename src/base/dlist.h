/*
 * Intrusive doubly linked lists, NULL-terminated, of structs that carry
 * their own links (as utlist's DL_ macros): walk them with ->next. A list is
 * a head pointer (links named prev and next), or a head and a tail pointer
 * with the names of the links given (_prev points towards the head).
 * Queues (OTE_QUEUE_): singly linked, a head and a tail pointer, the link's
 * name given.
 */
#ifndef OTE_BASE_DLIST_H
#define OTE_BASE_DLIST_H

#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>

#define OTE_DLIST_PUSH_FRONT(_head, _elem) OTE_DLIST_PUSH_FRONT_L(_head, _elem, prev, next)
#define OTE_DLIST_REMOVE(_head, _elem)     OTE_DLIST_REMOVE_L(_head, _elem, prev, next)

/* The same with the names of the links given. */
#define OTE_DLIST_PUSH_FRONT_L(_head, _elem, _prev, _next)                                     \
    do {                                                                                       \
        (_elem)->_prev = NULL;                                                                 \
        (_elem)->_next = (_head);                                                              \
        if ((_head) != NULL)                                                                   \
            (_head)->_prev = (_elem);                                                          \
        (_head) = (_elem);                                                                     \
    } while (0)

/* Unlinks _elem; one in no list (no prev, not the head) changes nothing. Its links stay. */
#define OTE_DLIST_REMOVE_L(_head, _elem, _prev, _next)                                         \
    do {                                                                                       \
        if ((_elem)->_prev != NULL)                                                            \
            (_elem)->_prev->_next = (_elem)->_next;                                            \
        else if ((_head) == (_elem))                                                           \
            (_head) = (_elem)->_next;                                                          \
        if ((_elem)->_next != NULL)                                                            \
            (_elem)->_next->_prev = (_elem)->_prev;                                            \
    } while (0)

#define OTE_DLIST2_PUSH_FRONT(_head, _tail, _elem, _prev, _next)                               \
    do {                                                                                       \
        (_elem)->_prev = NULL;                                                                 \
        (_elem)->_next = (_head);                                                              \
        if ((_head) != NULL)                                                                   \
            (_head)->_prev = (_elem);                                                          \
        else                                                                                   \
            (_tail) = (_elem);                                                                 \
        (_head) = (_elem);                                                                     \
    } while (0)

/* The tail is the head of the list read backwards. */
#define OTE_DLIST2_PUSH_BACK(_head, _tail, _elem, _prev, _next)                                \
    OTE_DLIST2_PUSH_FRONT(_tail, _head, _elem, _next, _prev)

/* Unlinks _elem, which is in the list. Its links stay. */
#define OTE_DLIST2_REMOVE(_head, _tail, _elem, _prev, _next)                                   \
    do {                                                                                       \
        if ((_elem)->_prev != NULL)                                                            \
            (_elem)->_prev->_next = (_elem)->_next;                                            \
        else                                                                                   \
            (_head) = (_elem)->_next;                                                          \
        if ((_elem)->_next != NULL)                                                            \
            (_elem)->_next->_prev = (_elem)->_prev;                                            \
        else                                                                                   \
            (_tail) = (_elem)->_prev;                                                          \
    } while (0)

/* Appends the chain _first.._last (linked by _next); the chain's last link is cleared. */
#define OTE_QUEUE_PUSH_CHAIN(_head, _tail, _first, _last, _next)                                \
    do {                                                                                       \
        (_last)->_next                                   = NULL;                               \
        *((_tail) != NULL ? &(_tail)->_next : &(_head)) = (_first);                            \
        (_tail)                                          = (_last);                            \
    } while (0)

#define OTE_QUEUE_PUSH(_head, _tail, _elem, _next)                                             \
    OTE_QUEUE_PUSH_CHAIN(_head, _tail, _elem, _elem, _next)

/* Frees every element of a singly linked list (link _next); _head ends NULL. */
#define OTE_LIST_FREE(_head, _next)                                                            \
    while ((_head) != NULL) {                                                                  \
        void *_x = (_head);                                                                    \
                                                                                               \
        (_head) = (_head)->_next;                                                              \
        free(_x);                                                                              \
    }

/*
 * Release every element of a list that other threads change under lock:
 * take the head under the lock, release it without (release unlinks it),
 * until the list is empty.
 */
#define OTE_DLIST_DRAIN(_lock, _head, _type, _release)                                         \
    for (;;) {                                                                                 \
        _type _x;                                                                              \
                                                                                               \
        pthread_mutex_lock(_lock);                                                             \
        _x = (_head);                                                                          \
        pthread_mutex_unlock(_lock);                                                           \
        if (_x == NULL)                                                                        \
            break;                                                                             \
        _release(_x);                                                                          \
    }

#endif
