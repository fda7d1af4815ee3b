# Throughput of one producer-to-consumer handoff (set + get, or put + get)
# against value size, one line per system, with the machine's limits dashed.
# Data: the .dat file the side-by-side harness (sbs) writes.
#   gnuplot -e "datafile='bench/results/side_by_side_throughput.dat'; \
#               outfile='bench/results/side_by_side.svg'" bench/side_by_side/plot.gp
if (!exists("datafile")) datafile = 'bench/results/side_by_side_throughput.dat'
if (!exists("outfile")) outfile = 'bench/results/side_by_side.svg'

set terminal svg size 960,760 dynamic enhanced font "sans,12" background rgb "white"
set output outfile
set datafile missing '?'
set datafile separator tab
set key autotitle columnhead
set title "Handoff throughput by value size (same machine, one client)"
set xlabel "value size"
set ylabel "GB/s (log scale)"
set logscale xy
set xtics ("1 KiB" 1024, "64 KiB" 65536, "1 MiB" 1048576, "16 MiB" 16777216, "64 MiB" 67108864, "256 MiB" 268435456)
set grid xtics ytics mytics
set key outside below center horizontal maxcols 2 spacing 1.1 font ",11"
set xrange [700:400000000]

plot datafile using 1:2 with linespoints lw 2 pt 7 lc rgb "#1f77b4", \
     ''       using 1:3 with linespoints lw 2 pt 5 lc rgb "#17becf", \
     ''       using 1:4 with linespoints lw 2 pt 9 lc rgb "#2ca02c", \
     ''       using 1:5 with linespoints lw 2 pt 11 lc rgb "#9467bd", \
     ''       using 1:6 with linespoints lw 2 pt 13 lc rgb "#d62728", \
     ''       using 1:7 with linespoints lw 2 pt 15 lc rgb "#ff7f0e", \
     ''       using 1:8 with linespoints lw 2 pt 3 lc rgb "#8c564b", \
     ''       using 1:9 with lines dt 2 lw 1.5 lc rgb "#444444", \
     ''       using 1:10 with lines dt 3 lw 1.5 lc rgb "#888888"
