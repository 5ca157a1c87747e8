import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;

import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.metadata.placement.UsableBroker;
import org.apache.kafka.tools.reassign.ReassignPartitionsCommand;

/**
 * Kafka's own {@code kafka-reassign-partitions --generate} computation, run on clusters read from
 * stdin: {@code ReassignPartitionsCommand.calculateAssignment} from the tools jar (private, called by
 * reflection), which is what the tool runs once it has read the current assignment and the brokers
 * from a cluster. Its placer is the tool's own static {@code StripedReplicaPlacer(new Random())}.
 *
 * <p>Input, per case: {@code case NAME}, {@code brokers ID:RACK ...} (RACK {@code -} for none), one
 * {@code p TOPIC PARTITION R1,R2,...} line per partition, then {@code end}. Output, per case:
 * {@code case NAME NANOS} (the call alone, this JVM's first call for the first case), then one
 * {@code TOPIC PARTITION R1,R2,...} line per proposed partition, then {@code end}.
 *
 * <p>Run by benchmarks/kafka_generate.py in source-file mode: {@code java -cp 'TOOLS/*' KafkaGenerate.java}.
 */
public final class KafkaGenerate {
    public static void main(String[] args) throws Exception {
        Method calculate = ReassignPartitionsCommand.class.getDeclaredMethod("calculateAssignment", Map.class, List.class);
        calculate.setAccessible(true);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        StringBuilder out = new StringBuilder();
        String name = null;
        List<UsableBroker> brokers = new ArrayList<>();
        Map<TopicPartition, List<Integer>> current = new HashMap<>();
        for (String line; (line = in.readLine()) != null; ) {
            String[] f = line.trim().split(" ");
            switch (f[0]) {
                case "case" -> name = f[1];
                case "brokers" -> {
                    for (int k = 1; k < f.length; k++) {
                        String[] idRack = f[k].split(":", 2);
                        Optional<String> rack = idRack[1].equals("-") ? Optional.empty() : Optional.of(idRack[1]);
                        brokers.add(new UsableBroker(Integer.parseInt(idRack[0]), rack, false));
                    }
                }
                case "p" -> current.put(new TopicPartition(f[1], Integer.parseInt(f[2])), replicas(f[3]));
                case "end" -> {
                    long start = System.nanoTime();
                    @SuppressWarnings("unchecked")
                    Map<TopicPartition, List<Integer>> proposal =
                        (Map<TopicPartition, List<Integer>>) calculate.invoke(null, current, brokers);
                    long nanos = System.nanoTime() - start;
                    out.append("case ").append(name).append(' ').append(nanos).append('\n');
                    proposal.forEach((tp, reps) -> out.append(tp.topic()).append(' ').append(tp.partition()).append(' ')
                        .append(String.join(",", reps.stream().map(String::valueOf).toList())).append('\n'));
                    out.append("end\n");
                    brokers = new ArrayList<>();
                    current = new HashMap<>();
                }
                default -> throw new IllegalArgumentException("unexpected input line: " + line);
            }
        }
        System.out.print(out);
    }

    private static List<Integer> replicas(String csv) {
        List<Integer> reps = new ArrayList<>();
        for (String r : csv.split(",")) {
            reps.add(Integer.parseInt(r));
        }
        return reps;
    }
}
