package io.kafkaops.spark;

import java.io.Serializable;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.Consumer;
import java.util.function.Supplier;

import org.apache.spark.TaskContext;
import org.apache.spark.util.TaskCompletionListener;

/**
 * State of a Spark SQL function per task attempt, dropped (after {@code onCompletion}) when the task
 * completes. A Spark task deserializes its own copy of a function, so there is usually one entry; the
 * map keeps it correct if one copy is ever shared by concurrent tasks.
 */
final class PerTask<T> implements Serializable {
    private static final long serialVersionUID = 1L;

    private transient volatile Map<Long, T> tasks;

    T get(Supplier<T> create, Consumer<T> onCompletion) {
        Map<Long, T> map = tasks;
        if (map == null) {
            synchronized (this) {
                if (tasks == null) {
                    tasks = new ConcurrentHashMap<>();
                }
                map = tasks;
            }
        }
        TaskContext context = TaskContext.get();
        long attempt = context == null ? -1L : context.taskAttemptId();
        T state = map.get(attempt);
        if (state == null) {
            T made = create.get();
            map.put(attempt, made);
            if (context != null) {
                Map<Long, T> owner = map;
                context.addTaskCompletionListener((TaskCompletionListener) ctx -> onCompletion.accept(owner.remove(attempt)));
            }
            state = made;
        }
        return state;
    }
}
